"""The tools a request offers: their names, how a name as written maps to one, and their schemas.

A Toolbox is built from the request's `tools` (or legacy `functions`) and is immutable. Tool-definition
validity is the request parser's job; here odd input is tolerated (skipped or treated as unconstrained)
so that nothing crashes. Compiled validators are cached by the schema's canonical JSON; a Toolbox itself,
with what it works out once (its validators and argument keys, whether a schema branches, its size), by the tools' JSON
(`Toolbox.of`): an agent sends the same tools with every request.
"""

from __future__ import annotations

import functools
import json
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
BOOKS_KEPT = 64  # tool lists whose Toolbox is kept (Toolbox.of), the least recently used dropped first
BOOK_KEY_BYTES = 256 * 1024  # a tool list longer than this as JSON is not kept


@functools.lru_cache(maxsize=256)
def _compiled(schema_json: bytes) -> Validator:
    schema = json.loads(schema_json)
    try:
        check_schema(schema)
    except SchemaError:
        schema = _NO_CONSTRAINTS
    if refusal(schema) is not None:  # the request parser refused it already; never reached from a request
        schema = _NO_CONSTRAINTS
    return validator_for(schema)


def _canonical(schema: Mapping[str, object]) -> bytes:
    """The schema's cache key (and the text it is compiled from): orjson with sorted keys."""
    try:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: a non-str key, a value JSON cannot hold, nesting too deep
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
    """The offered tools by name, in offered order."""

    __slots__ = ("tools", "names", "name_set", "_branching", "_size", "_checks")

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            self.tools.setdefault(tool.name, tool)
        self.names: tuple[str, ...] = tuple(self.tools)
        self.name_set: frozenset[str] = frozenset(self.names)
        self._branching: bool | None = None
        self._size: int | None = None
        self._checks: dict[str, tuple[Validator, Keys]] = {}  # per tool called: what checking its arguments reads

    @property
    def schema_bytes(self) -> int:
        """The tools' schemas as JSON, in bytes: what building a grammar or a prompt from them is linear in."""
        if self._size is None:
            self._size = sum(len(_canonical(tool.parameters)) for tool in self.tools.values())
        return self._size

    @property
    def branching(self) -> bool:
        """Whether a tool's schema branches or refers (anyOf, oneOf, allOf, $ref, if, not): validating against it
        may cost many steps (validate.MAX_STEPS), so the round loop judges its answers off the event loop."""
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
        """`from_tools(tools)`, the same Toolbox for the same tools (as JSON) while it is among the last
        BOOKS_KEPT tool lists seen."""
        try:
            key = orjson.dumps(tools)
        except TypeError:  # orjson.JSONEncodeError: nothing a parsed request body holds, but never a crash
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

    def validator(self, name: str) -> Validator:
        return self._check_of(name)[0]

    def check(self, name: str, args: JSONValue) -> list[Problem]:
        """Why `args` cannot be sent to tool `name`: one Problem per reason; [] when they are valid."""
        validator, keys = self._check_of(name)
        return problems_for(self.tools[name], validator, keys, args)

    def _check_of(self, name: str) -> tuple[Validator, Keys]:
        """The tool's compiled validator and the keys its arguments may hold, worked out once per Toolbox (only
        for the tools actually called)."""
        found = self._checks.get(name)
        if found is None:
            parameters = self.tools[name].parameters
            found = self._checks[name] = (_compiled(_canonical(parameters)), object_keys(parameters, top=True))
        return found


_BOOKS: OrderedDict[bytes, Toolbox] = OrderedDict()
