"""One reading of a tool's arguments schema, so what validate.py refuses grammar.py never writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sanctum_proxy.core.shapes import JSONValue

COMPOSED = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas", "unevaluatedProperties", "not")


@dataclass(frozen=True)
class Keys:

    properties: Mapping[str, object]
    required: tuple[str, ...]  # listed ones in order, then unlisted ones
    others: bool | Mapping[str, object]  # unlisted keys: False none, True any, or their values' schema
    patterns: tuple[str, ...]  # patternProperties keys

    @property
    def optional(self) -> list[str]:
        return [k for k in self.properties if k not in self.required]


def object_keys(schema: Mapping[str, object], *, top: bool) -> Keys:
    """The keys `schema` allows; the arguments object (`top`) is closed unless opened."""
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
    """The enum or const values the schema's `type` allows; none where they contradict it."""
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else [k for k in kind if isinstance(k, str)] if isinstance(kind, list) \
        else None
    if kinds is None:
        return list(values)
    return [v for v in values if any(is_type(v, k) for k in kinds)]


def is_type(value: JSONValue, kind: str) -> bool:
    """JSON Schema's `type` test: an integral float is an integer, a boolean no number."""
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kinds: dict[str, type | tuple[type, ...]] = {"string": str, "boolean": bool, "array": list, "object": dict,
                                                "null": type(None)}
    expected = kinds.get(kind)
    return expected is not None and isinstance(value, expected)
