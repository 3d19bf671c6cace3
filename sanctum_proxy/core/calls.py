"""The immutable data every path of the core speaks: offered tools, candidate and mended calls, problems."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from sanctum_proxy.core import openai_chat
from sanctum_proxy.core.shapes import JSONValue

Reason = Literal[
    "unknown_spell",
    "missing_arguments",
    "unexpected_arguments",
    "invalid_arguments",
    "malformed_json",
    "missing_call",
    "ungrounded_arguments",
    "repeated_call",
    "calls_not_allowed",
]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Candidate:
    """A call as the model wrote it; `arguments` is JSON text (maybe broken), a parsed dict, or None."""

    name: str
    arguments: str | dict[str, JSONValue] | None
    source: str  # "native", or the codec that found it
    raw: str
    id: str | None = None
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Found:
    """A span of call markup (`text[start:end]`); a span without calls holds `reasoning`."""

    start: int
    end: int
    candidates: tuple[Candidate, ...]
    reasoning: str = ""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # byte-identical to the model's when valid

    def to_openai(self) -> openai_chat.ToolCall:
        return openai_chat.tool_call(self.id, self.name, self.arguments)

    @classmethod
    def from_wire(cls, call: Mapping[str, object], index: int) -> ToolCall:
        """A wire call as the proxy holds one: a missing id becomes `call_{index}`, a missing name ""."""
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
        return cls(str(call.get("id") or f"call_{index}"), str(function.get("name") or ""), arguments or "{}")


@dataclass(frozen=True)
class Repair:
    tool: str
    call_id: str
    repairs: tuple[str, ...]
    raw: str


@dataclass(frozen=True)
class Problem:
    reason: Reason
    tool: str | None  # as written
    details: tuple[str, ...]
    raw: str


@dataclass(frozen=True)
class Assessment:
    calls: tuple[ToolCall, ...]
    content: str | None  # None if empty
    repairs: tuple[Repair, ...] = ()
    problems: tuple[Problem, ...] = ()
    dropped: tuple[ToolCall, ...] = field(default=())  # cut by parallel_tool_calls=false
    reasoning: str | None = None
    duplicates: tuple[ToolCall, ...] = ()  # id: the kept one's

    @property
    def ok(self) -> bool:
        return not self.problems


def content_text(content: JSONValue) -> str:
    """A message content as text: a string, or a list's text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def new_call_id() -> str:
    """An OpenAI-like id for a call made out of text."""
    return "call_" + secrets.token_hex(12)


# Required calls show type hints, so a grammar-held model writes its own values.
_TYPE_HINTS = {"integer": "integer", "number": "number", "string": "string", "boolean": "true or false",
               "array": "array", "object": "object"}
_HINT = re.compile(r"<(?:integer|number|string|true or false|array|object|value|one of [^<>]*)>")
_MARK = re.compile(r"""(["']?)@@sanctum-hint-(\d+)@@\1""")
_PLACEHOLDERS: dict[str, JSONValue] = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
_STRING_PLACEHOLDER = "..."
# Placeholders no real call holds: one absent from the conversation was copied (repair/grounding).
COPIED_EXAMPLES: tuple[JSONValue, ...] = (_PLACEHOLDERS["number"], _STRING_PLACEHOLDER)


def example_text(parameters: JSONValue, render: Callable[[dict[str, JSONValue]], str] | None = None, *,
                 hints: bool = True) -> str:
    """A tool's first two arguments as the prompts show them: type hints, or placeholders with `hints=False`."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    items = list(props.items())[:2] if isinstance(props, dict) else []
    if not hints:
        values = {key: _placeholder(spec) for key, spec in items}
        return render(values) if render is not None else json.dumps(values, ensure_ascii=False, separators=(",", ":"))
    shown = [_hint(spec) for _, spec in items]
    marked: dict[str, JSONValue] = {key: f"@@sanctum-hint-{i}@@" for i, (key, _) in enumerate(items)}
    text = render(marked) if render is not None else json.dumps(marked, ensure_ascii=False, separators=(",", ":"))
    return _MARK.sub(lambda m: shown[int(m.group(2))], text)


def _placeholder(spec: JSONValue) -> JSONValue:
    if isinstance(spec, dict) and isinstance(spec.get("enum"), list) and spec["enum"]:
        return spec["enum"][0]
    kind = spec.get("type") if isinstance(spec, dict) else None
    return _PLACEHOLDERS.get(str(kind), _STRING_PLACEHOLDER)


def _hint(spec: JSONValue) -> str:
    if isinstance(spec, dict) and isinstance(spec.get("enum"), list) and spec["enum"]:
        shown = ", ".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"][:4])
        return f"<one of {shown}{', ...' if len(spec['enum']) > 4 else ''}>"
    kind = spec.get("type") if isinstance(spec, dict) else None
    return f"<{_TYPE_HINTS.get(kind, 'value') if isinstance(kind, str) else 'value'}>"


def is_example_hint(value: JSONValue) -> bool:
    """Whether a value is a prompt hint (`"<string>"`) copied as a value."""
    return isinstance(value, str) and _HINT.fullmatch(value.strip().rstrip(",;.: ")) is not None
