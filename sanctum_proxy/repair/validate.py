"""A tool's arguments schema read one way: the keys and values it allows, the checks against it, tier 1's coercions."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from referencing.exceptions import Unresolvable

from sanctum_proxy.core.calls import Problem, Reason, Tool
from sanctum_proxy.core.decoded_json import Decoded
from sanctum_proxy.core.lenient_json import decode
from sanctum_proxy.core.shapes import JSONObject, JSONValue
from sanctum_proxy.repair.schemas import StepsExhausted, search, steps

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


MAX_ERRORS = 20
# What nested arguments multiply under anyOf / oneOf / allOf (docs/contract.md, Budgets).
MAX_STEPS = 30_000
MAX_MESSAGE_CHARS = 200


def problems_for(tool: Tool, validator: Validator, keys: Keys, args: JSONValue) -> list[Problem]:
    """One Problem per tier-2 reason (missing, unexpected, invalid), each detail naming the argument."""
    schema = tool.parameters
    if isinstance(args, dict) and _plainly_valid(schema, args, 0) and not _unexpected(keys, args):
        return []  # jsonschema would agree, at several times the cost
    if not isinstance(args, dict):
        detail = f"the arguments must be a JSON object, not {_json_type(args)}"
        return [_problem("invalid_arguments", tool.name, [detail], args)]
    out: list[Problem] = []
    missing = [f"missing required argument {k!r}" for k in _required(schema) if k not in args]
    if missing:
        out.append(_problem("missing_arguments", tool.name, missing, args))
    extra = [f"unexpected argument {k!r}: the tool has no such parameter" for k in _unexpected(keys, args)]
    if extra:
        out.append(_problem("unexpected_arguments", tool.name, extra, args))
    invalid = _invalid(validator, args)
    if invalid:
        out.append(_problem("invalid_arguments", tool.name, invalid, args))
    return out


_PLAIN_KEYS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "description",
        "title",
        "default",
        "examples",
        "format",
        "$schema",
        "$id",
        "$comment",
    }
)


def _plainly_valid(schema: JSONValue, value: JSONValue, depth: int) -> bool:
    """True only when `value` is valid under a schema of plain keywords; False: the validator decides."""
    if not isinstance(schema, dict) or depth > 16 or not _PLAIN_KEYS.issuperset(schema):
        return False
    kind = schema.get("type")
    if isinstance(kind, str):
        if not _is(value, kind):
            return False
    elif kind is not None or "type" in schema:
        types = _types(schema)
        if not types or not any(_is(value, t) for t in types):
            return False
    enum = schema.get("enum")
    if enum is not None and not (isinstance(value, str) and isinstance(enum, list) and value in enum):
        return False
    if isinstance(value, dict):
        return _plain_object(schema, value, depth)
    items = schema.get("items")
    if isinstance(value, list) and items is not None:
        return all(_plainly_valid(items, v, depth + 1) for v in value)
    return True


def _plain_object(schema: Mapping[str, object], value: JSONObject, depth: int) -> bool:
    props = schema.get("properties", {})
    addl = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not (addl is True or addl is False):
        return False
    required = schema.get("required", [])
    if not isinstance(required, list) or any(not isinstance(k, str) or k not in value for k in required):
        return False
    for key, sub in value.items():
        if key in props:
            if not _plainly_valid(props[key], sub, depth + 1):
                return False
        elif addl is False:
            return False
    return True


def _problem(reason: Reason, tool: str, details: list[str], args: JSONValue) -> Problem:
    try:
        raw = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raw = ""
    return Problem(reason=reason, tool=tool, details=tuple(details), raw=raw)


def _required(schema: Mapping[str, object]) -> list[str]:
    req = schema.get("required")
    return [k for k in req if isinstance(k, str)] if isinstance(req, list) else []


def _unexpected(keys: Keys, args: JSONObject) -> list[str]:
    """The keys the arguments object may not hold, read as the grammar reads them."""
    if keys.others is not False:
        return []  # any key, or keys whose values jsonschema judges
    return [k for k in args if k not in keys.properties and not any(search(p, k) for p in keys.patterns)]


def _invalid(validator: Validator, args: JSONObject) -> list[str]:
    details: list[str] = []
    try:
        with steps(MAX_STEPS):
            for err in validator.iter_errors(args):
                if not err.absolute_path and err.validator in ("required", "additionalProperties"):
                    continue  # reported as missing / unexpected
                details.append(_describe(err))
                if len(details) >= MAX_ERRORS:
                    break
    except StepsExhausted:
        return [*sorted(details), f"the arguments: checking them against the schema took more than the proxy's "
                f"budget of {MAX_STEPS} steps (nested values under anyOf / oneOf / allOf multiply the work); "
                "send simpler arguments"]
    except (Unresolvable, RecursionError, re.error):
        return details  # the schema, not the model, is at fault; the request parser owns that
    return sorted(details)


def _describe(err: ValidationError) -> str:
    message = err.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    path = list(err.absolute_path)
    if not path:
        return f"the arguments: {message}"
    where = str(path[0]) + "".join(f"[{p!r}]" for p in path[1:])
    return f"argument {where!r}: {message}"


def _json_type(value: JSONValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# --- coercion --------------------------------------------------------------------------------------

_INTEGER = re.compile(r"-?(?:0|[1-9]\d*)")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_PADDED_INTEGER = re.compile(r"-?0\d+")
_BOOLS = {"true": True, "false": False, "True": True, "False": False}
MAX_COERCE_DEPTH = 16
# How a format that writes every parameter as text (XML tags: Codec.text_values) is read: "5" typed as an
# integer, "[1, 2]" decoded as an array. Named repairs only where a value could have been written typed.
TYPED_FROM_TEXT = frozenset({"coerced_integer", "coerced_number", "coerced_boolean", "coerced_null",
                             "decoded_json_string"})


def coerce(args: JSONObject, schema: Mapping[str, object], *, as_text: bool = False
           ) -> tuple[JSONObject, tuple[str, ...]]:
    """`args` with the lossless coercions its schema asks for, and their names; `as_text`: values are tag text."""
    repairs: dict[str, None] = {}
    value = _coerce_object(args, schema, repairs, 0, as_text)
    return value, tuple(repairs)


def _coerce_object(
    obj: JSONObject, schema: Mapping[str, object], repairs: dict[str, None], depth: int, as_text: bool = False
) -> JSONObject:
    props = schema.get("properties")
    if not isinstance(props, Mapping) or depth > MAX_COERCE_DEPTH:
        return obj
    out = dict(obj)
    for key, sub in props.items():
        if key in out and isinstance(sub, Mapping):
            out[key] = _coerce_value(out[key], sub, repairs, depth + 1, as_text)
    return out


def _coerce_value(value: JSONValue, schema: Mapping[str, object], repairs: dict[str, None], depth: int,
                  as_text: bool = False) -> JSONValue:
    types = _types(schema)
    nested_text = as_text and isinstance(value, dict | list)  # a structure the codec built of text leaves
    if as_text and isinstance(value, str) and types:
        value = _typed_text(value, types, repairs)
    elif types and not any(_is(value, t) for t in types):
        made: dict[str, None] = {}
        value = _convert(value, types, made)
        repairs.update(made)
    if isinstance(value, dict):
        return _coerce_object(value, schema, repairs, depth, nested_text)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping) and depth <= MAX_COERCE_DEPTH:
        return [_coerce_value(v, items, repairs, depth + 1, nested_text) for v in value]
    return value


# Python's and other languages' type names that tool schemas are written with in place of JSON Schema's.
_ALIASES = {"float": "number", "double": "number", "int": "integer", "bool": "boolean", "str": "string",
            "dict": "object", "list": "array"}


def _typed_text(value: str, types: set[str], repairs: dict[str, None]) -> JSONValue:
    """A tag-text value typed as llama.cpp types it: non-string types first, else the text as written."""
    others = types - {"string"}
    if not others:
        return value
    made: dict[str, None] = {}
    text = value.strip()
    if others & {"integer", "number"} and _PADDED_INTEGER.fullmatch(text):
        text = str(int(text))  # "018956": the zeros a text value is padded with
    typed = _from_string(text, others, made)
    if not made:
        return value
    repairs.update(dict.fromkeys(r for r in made if r not in TYPED_FROM_TEXT))
    return typed


def _types(schema: Mapping[str, object], depth: int = 0) -> set[str]:
    """The JSON types a schema allows: its `type` (a name or a list), or the union of its anyOf / oneOf branches'."""
    t = schema.get("type")
    if isinstance(t, str):
        return {_ALIASES.get(t, t)}
    if isinstance(t, list):
        return {_ALIASES.get(x, x) for x in t if isinstance(x, str)}
    out: set[str] = set()
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and depth < 4:
            for branch in branches:
                out |= _types(branch, depth + 1) if isinstance(branch, Mapping) else set()
    return out


_is = is_type


def _convert(value: JSONValue, types: set[str], repairs: dict[str, None]) -> JSONValue:
    if isinstance(value, str):
        return _from_string(value, types, repairs)
    if "string" in types and isinstance(value, int) and not isinstance(value, bool):
        repairs["coerced_string"] = None
        return str(value)
    return value


def _from_string(value: str, types: set[str], repairs: dict[str, None]) -> JSONValue:
    if "integer" in types and _INTEGER.fullmatch(value):
        repairs["coerced_integer"] = None
        return int(value)
    if "number" in types and _NUMBER.fullmatch(value):
        number = float(value) if any(c in value for c in ".eE") else int(value)
        if math.isfinite(number):
            repairs["coerced_number"] = None
            return number
    if "boolean" in types and value in _BOOLS:
        repairs["coerced_boolean"] = None
        return _BOOLS[value]
    if "null" in types and value == "null":
        repairs["coerced_null"] = None
        return None
    if types & {"array", "object"} and value[:1] in ("[", "{"):
        for text in _json_readings(value):
            decoded = decode(text)
            if isinstance(decoded, Decoded) and "json_repair" not in decoded.repairs \
                    and any(_is(decoded.value, t) for t in types):  # json_repair's guess at a structure is no coercion
                repairs["decoded_json_string"] = None
                repairs.update(dict.fromkeys(decoded.repairs))
                return decoded.value
    return value


_BARE_QUOTE = re.compile(r'(?<!\\)"')


def _json_readings(value: str) -> tuple[str, ...]:
    """The text as JSON, and with its escaped quotes undone where every quote is escaped."""
    if '\\"' in value and not _BARE_QUOTE.search(value):
        return value, value.replace('\\"', '"')
    return (value,)
