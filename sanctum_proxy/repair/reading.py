"""One reading of a tool's arguments schema: what keys an object may hold, and which enum or const values its
type allows. The grammar that writes arguments (grammar.py) and the validator that judges them (validate.py)
both read a schema here, so that what validation refuses the grammar never writes.

    object_keys(schema, top=...)   the listed properties, the required keys, what other keys may come
    typed_values(values, schema)   the enum / const values of the schema's own type

The tool's arguments object itself (`top`) is closed unless it says otherwise: no `additionalProperties` means no
key beyond `properties` (`{"type": "object", "properties": {}}` takes `{}` only), which is what the model is told
(correct.signature lists the parameters) and what OpenAI's strict mode asks. Only where the properties live in
sub-schemas (`anyOf`, `allOf`, `$ref`, ...) and the object lists none of its own are other keys left to them. An
object nested inside the arguments follows JSON Schema (no `additionalProperties`: any key), so a free-form
`{"type": "object"}` parameter stays free-form; the grammar writes only its listed properties where it has any.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sanctum_proxy.core.shapes import JSONValue

COMPOSED = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas", "unevaluatedProperties", "not")


@dataclass(frozen=True)
class Keys:
    """The keys an object may hold."""

    properties: Mapping[str, object]  # listed, in the schema's order (a name -> its schema)
    required: tuple[str, ...]  # listed ones in the schema's order, then any the properties do not list
    others: bool | Mapping[str, object]  # keys not listed: False none, True any value, or the schema of their values
    patterns: tuple[str, ...]  # patternProperties: a key matching one is allowed too (the grammar never writes one)

    @property
    def optional(self) -> list[str]:
        return [k for k in self.properties if k not in self.required]


def object_keys(schema: Mapping[str, object], *, top: bool) -> Keys:
    """The keys `schema` allows in an object: `top` for the tool's arguments object (see the module docstring)."""
    props = schema.get("properties")
    properties: Mapping[str, object] = props if isinstance(props, Mapping) else {}
    req = schema.get("required")
    named = [k for k in req if isinstance(k, str)] if isinstance(req, list) else []
    required = tuple(dict.fromkeys([k for k in properties if k in named] + [k for k in named if k not in properties]))
    pp = schema.get("patternProperties")
    patterns = tuple(p for p in pp if isinstance(p, str)) if isinstance(pp, Mapping) else ()
    addl = schema.get("additionalProperties")
    others: bool | Mapping[str, object]
    if addl is False or addl is True:
        others = addl
    elif isinstance(addl, Mapping):
        others = addl if addl else True
    elif top:
        others = not properties and any(k in schema for k in COMPOSED)
    else:
        others = True
    return Keys(properties, required, others, patterns)


def typed_values(values: Sequence[Any], schema: Mapping[str, object]) -> list[Any]:
    """The values of an `enum` (or a `const`) that the schema's `type` allows: none when the enum contradicts its
    type (BFCL has `{"type": "boolean", "enum": ["True", "False", "dontcare"]}`): no value is valid there."""
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else [k for k in kind if isinstance(k, str)] if isinstance(kind, list) \
        else None
    if kinds is None:
        return list(values)
    return [v for v in values if any(is_type(v, k) for k in kinds)]


def is_type(value: JSONValue, kind: str) -> bool:
    """JSON Schema's `type` test (an integral float is an integer; a boolean is no number)."""
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kinds: dict[str, type | tuple[type, ...]] = {"string": str, "boolean": bool, "array": list, "object": dict,
                                                "null": type(None)}
    expected = kinds.get(kind)
    return expected is not None and isinstance(value, expected)
