"""The tools a request offers: their names, how a written name maps to one, and their schemas.

Odd input is tolerated (the request parser judges it). Toolboxes are cached by the tools' JSON: agents resend
the same tools each request.
"""

from __future__ import annotations

import functools
import json
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import orjson
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

from sanctum_proxy.core.calls import Problem, Tool
from sanctum_proxy.core.shapes import JSONObject, JSONValue
from sanctum_proxy.core.tool_names import resolve_name
from sanctum_proxy.repair.reading import Keys, object_keys
from sanctum_proxy.repair.schemas import branches, check_schema, refusal, validator_for
from sanctum_proxy.repair.validate import problems_for

_NO_CONSTRAINTS: JSONObject = {"type": "object", "additionalProperties": True}
BOOKS_KEPT = 64  # least recently used dropped first
BOOK_KEY_BYTES = 256 * 1024  # longer tool lists are not kept
QUICK_CHECK_MS = 0.5  # a tool whose last check took longer is checked off the event loop


@functools.lru_cache(maxsize=256)
def _compiled(schema_json: bytes) -> Validator:
    schema = json.loads(schema_json)
    try:
        check_schema(schema)
    except SchemaError:
        schema = _NO_CONSTRAINTS
    if refusal(schema) is not None:  # the request parser refused it already
        schema = _NO_CONSTRAINTS
    return validator_for(schema)


def _canonical(schema: Mapping[str, object]) -> bytes:
    """The schema's cache key: orjson with sorted keys."""
    try:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a value or nesting JSON cannot hold
        return orjson.dumps(_NO_CONSTRAINTS)


def _tool_from(fn: JSONValue) -> Tool | None:
    if not isinstance(fn, Mapping):
        return None
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return None
    description = fn.get("description")
    params = fn.get("parameters")
    return Tool(
        name=name,
        description=description if isinstance(description, str) else "",
        parameters=dict(params) if isinstance(params, Mapping) else dict(_NO_CONSTRAINTS),
    )


class Toolbox:
    """The offered tools by name, in order."""

    __slots__ = ("tools", "names", "name_set", "_branching", "_size", "_checks", "_check_ms")

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            self.tools.setdefault(tool.name, tool)
        self.names: tuple[str, ...] = tuple(self.tools)
        self.name_set: frozenset[str] = frozenset(self.names)
        self._branching: bool | None = None
        self._size: int | None = None
        self._checks: dict[str, tuple[Validator, Keys]] = {}  # per tool called
        self._check_ms: dict[str, float] = {}  # per tool: how long its last check took

    @property
    def schema_bytes(self) -> int:
        """The schemas' JSON size, which grammar and prompt building are linear in."""
        if self._size is None:
            self._size = sum(len(_canonical(tool.parameters)) for tool in self.tools.values())
        return self._size

    @property
    def branching(self) -> bool:
        """Whether a schema branches or refers, so validating may take many steps."""
        if self._branching is None:
            self._branching = any(branches(tool.parameters) for tool in self.tools.values())
        return self._branching

    @classmethod
    def from_tools(cls, tools: JSONValue) -> Toolbox:
        items = tools if isinstance(tools, list) else []
        fns = [t.get("function") for t in items if isinstance(t, Mapping)]
        return cls([s for s in map(_tool_from, fns) if s is not None])

    @classmethod
    def of(cls, tools: JSONValue) -> Toolbox:
        """`from_tools`, reused for a list among the last BOOKS_KEPT."""
        try:
            key = orjson.dumps(tools)
        except TypeError:  # never from a parsed body
            return cls.from_tools(tools)
        if len(key) > BOOK_KEY_BYTES:
            return cls.from_tools(tools)
        book = _BOOKS.get(key)
        if book is None:
            book = _BOOKS[key] = cls.from_tools(tools)
            if len(_BOOKS) > BOOKS_KEPT:
                _BOOKS.popitem(last=False)
        else:
            _BOOKS.move_to_end(key)
        return book

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"Toolbox({list(self.names)!r})"

    def restricted_to(self, name: str) -> Toolbox:
        return Toolbox([self.tools[name]] if name in self.tools else [])

    def resolve(self, written: str) -> tuple[str | None, tuple[str, ...]]:
        return resolve_name(written, self.names)

    def by_keys(self, arguments: object) -> str | None:
        """The one tool whose properties hold every key of `arguments` (JSON text or an object); None when none
        or several do, or the arguments are not an object."""
        if isinstance(arguments, str):
            try:
                arguments = orjson.loads(arguments)
            except orjson.JSONDecodeError:
                return None
        if not isinstance(arguments, dict) or not arguments:
            return None
        fits = [name for name, tool in self.tools.items()
                if isinstance(props := tool.parameters.get("properties"), dict) and set(arguments) <= set(props)]
        return fits[0] if len(fits) == 1 else None

    def by_position(self, name: str, arguments: object) -> dict[str, JSONValue] | None:
        """Positional values (a JSON list) named in the order of the tool's properties; None when they do not
        read or outnumber the properties."""
        try:
            values = orjson.loads(arguments) if isinstance(arguments, str) else None
        except orjson.JSONDecodeError:
            return None
        props = self.tools[name].parameters.get("properties")
        if not isinstance(values, list) or not isinstance(props, dict) or len(values) > len(props):
            return None
        return dict(zip(props, values, strict=False))

    def sole_value(self, name: str, arguments: object) -> dict[str, JSONValue] | None:
        """One value written without its parameter (JSON text: a string, or `{key: string}` under a key the
        tool may not have), given to the tool's one required string parameter; None when it has no such one."""
        try:
            value = orjson.loads(arguments) if isinstance(arguments, str) else None
        except orjson.JSONDecodeError:
            return None
        parameters = self.tools[name].parameters
        required, props = parameters.get("required"), parameters.get("properties")
        props = props if isinstance(props, dict) else {}
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in props:
            return value
        if isinstance(value, dict) and len(value) == 1:
            value = next(iter(value.values()))
        if not isinstance(value, str) or not isinstance(required, list) or len(required) != 1:
            return None
        spec = props.get(required[0])
        kind = spec.get("type", "string") if isinstance(spec, dict) else None
        return {required[0]: value} if isinstance(required[0], str) and kind in ("string", ["string"]) else None

    def validator(self, name: str) -> Validator:
        return self._check_of(name)[0]

    def check(self, name: str, args: JSONValue) -> list[Problem]:
        """Why `args` cannot go to tool `name`, one Problem per reason."""
        started = time.perf_counter()
        validator, keys = self._check_of(name)
        problems = problems_for(self.tools[name], validator, keys, args)
        self._check_ms[name] = (time.perf_counter() - started) * 1000
        return problems

    def quick(self, name: object) -> bool:
        """Whether the tool's last check (its validator compiled) was quick enough for the event loop."""
        return isinstance(name, str) and self._check_ms.get(name, QUICK_CHECK_MS) < QUICK_CHECK_MS

    def _check_of(self, name: str) -> tuple[Validator, Keys]:
        """The tool's validator and argument keys, worked out on first call."""
        found = self._checks.get(name)
        if found is None:
            parameters = self.tools[name].parameters
            found = self._checks[name] = (_compiled(_canonical(parameters)), object_keys(parameters, top=True))
        return found


_BOOKS: OrderedDict[bytes, Toolbox] = OrderedDict()
