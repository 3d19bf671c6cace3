"""How the formats write a call's pieces as text."""

from __future__ import annotations

import json
from collections.abc import Mapping

import orjson

from sanctum_proxy.core.shapes import JSONValue


def as_object(arguments: JSONValue) -> JSONValue:
    """The arguments as a value; unparsable text stays a string."""
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    return arguments if arguments is not None else {}


def to_json(value: JSONValue) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer past 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments_text(arguments: JSONValue) -> str:
    """The arguments as JSON text; invalid JSON kept as written."""
    args = as_object(arguments)
    return args if isinstance(args, str) else to_json(args)


def json_call(name: str, arguments: JSONValue, key: str = "arguments") -> str:
    """`{"name": ..., "arguments": ...}` (or another key for the arguments)."""
    args = as_object(arguments)
    if isinstance(args, str):  # broken JSON from an earlier turn stays as the model wrote it
        return '{"name": ' + to_json(name) + f', "{key}": ' + args + "}"
    return to_json({"name": name, key: args})


def pairs(arguments: JSONValue) -> list[tuple[str, str]] | None:
    """Key/value texts for the XML-ish formats; None when the arguments are no object."""
    args = as_object(arguments)
    if not isinstance(args, Mapping):
        return None
    return [(str(k), v if isinstance(v, str) else to_json(v)) for k, v in args.items()]
