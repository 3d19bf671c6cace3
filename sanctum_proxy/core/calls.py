"""The data the pure core passes around: offered tools, candidate calls, mended calls, problems.

Everything here is plain immutable data. Parsing (`codecs/`), repair (`repair/`), prompted mode and
the streaming assembler all speak these types, so a call looks the same whichever path produced it.

    Tool        one offered tool: name, description, parameters (a JSON Schema object)
    Candidate    a call as found in an answer, before repair (name and arguments as written)
    Found        where a codec found call markup in text, and the candidates in it
    ToolCall     a call that passed tier 1 and validation: ready for the client (`to_openai`: core/openai_chat)
    Repair       one tier-1 mend of one call (becomes a SpellCallRepaired omen)
    Problem      why a candidate cannot be sent (becomes a tier-2 correction and a SpellCallRejected omen)
    Assessment   what tier 1 made of one upstream answer

and the helpers every tier shares: `content_text` (a message content as text), `new_call_id`,
`example_text` (a tool's arguments as the prompts show them) and `is_example_hint`.
"""

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
]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Candidate:
    """A call as the model wrote it. `arguments` is what was found: a str (JSON text, maybe broken),
    a dict (already parsed, e.g. Ollama's object arguments) or None (no arguments given)."""

    name: str
    arguments: str | dict[str, JSONValue] | None
    source: str  # "native" or the codec name that found it in content ("hermes", "mistral", ...)
    raw: str  # the exact text (or JSON of the native call) it came from, for omens and corrections
    id: str | None = None
    repairs: tuple[str, ...] = ()  # mends the codec already made to the markup (e.g. "unclosed_braces")


@dataclass(frozen=True)
class Found:
    """A span of call markup in an answer's text (`text[start:end]`) and the calls it holds. A reasoning
    block of a call format (harmony's analysis channel, a thinking block) is a span without calls whose
    text is `reasoning`: not content, never read for calls, returned as `reasoning_content`."""

    start: int
    end: int
    candidates: tuple[Candidate, ...]
    reasoning: str = ""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text sent to the client (byte-identical to the model's when it was valid)

    def to_openai(self) -> openai_chat.ToolCall:
        """The call as the chat wire holds it (core/shapes.ToolCallWire)."""
        return openai_chat.tool_call(self.id, self.name, self.arguments)

    @classmethod
    def from_wire(cls, call: Mapping[str, object], index: int) -> ToolCall:
        """A chat wire call (ToolCallWire, or a client's as sent) as the proxy holds one: a missing id is
        `call_{index}`, a missing name "", arguments that are not JSON text are written as JSON."""
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
    repairs: tuple[str, ...]  # what was mended, e.g. ("trailing_comma", "single_quotes", "name_case")
    raw: str


@dataclass(frozen=True)
class Problem:
    reason: Reason
    tool: str | None  # the tool it concerns (the name as written, for unknown_spell)
    details: tuple[str, ...]  # each names exactly what to fix, e.g. "missing required argument 'city'"
    raw: str


@dataclass(frozen=True)
class Assessment:
    calls: tuple[ToolCall, ...]
    content: str | None  # the answer's text with call markup removed (prose may stay); None if empty
    repairs: tuple[Repair, ...] = ()
    problems: tuple[Problem, ...] = ()
    dropped: tuple[ToolCall, ...] = field(default=())  # valid calls cut by parallel_tool_calls=false
    reasoning: str | None = None  # reasoning blocks of call formats found in the text (never calls)
    duplicates: tuple[ToolCall, ...] = ()  # calls in content that repeat an earlier one (id: the kept one's)

    @property
    def ok(self) -> bool:
        return not self.problems


def content_text(content: JSONValue) -> str:
    """A message content as text: a string, or the text parts of a list of parts (a part without a type is
    text); anything else is no text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def new_call_id() -> str:
    """An id for a call the proxy made out of text (`call_` and 24 hex digits, like OpenAI's)."""
    return "call_" + secrets.token_hex(12)


# The prompts' example call. Where a call is required, it shows the shape of a call and no value a model could
# copy: each argument a hint of its type (`{"weight":<number>,"unit":<one of "kg", "lb">}`), no JSON value, so
# a grammar-held model writes a value of its own (under tool_choice required Gemma 3 270M copied the old
# placeholders into 50 of 61 calls; bench/results/bfcl_heldout.md). Where text may win, it shows placeholder
# values (an enum's first value, 1, 1.5, true, [], {}, "..."): a model that copies 1.5 or "..." into a call
# nobody asked for is caught by grounding, which the hints lost on BFCL's held-out irrelevance entries (the
# model wrote the question's own values into an unrelated tool instead). A string holding a hint verbatim
# ("<string>") copied the template (`is_example_hint`).
_TYPE_HINTS = {"integer": "integer", "number": "number", "string": "string", "boolean": "true or false",
               "array": "array", "object": "object"}
_HINT = re.compile(r"<(?:integer|number|string|true or false|array|object|value|one of [^<>]*)>")
_MARK = re.compile(r"""(["']?)@@sanctum-hint-(\d+)@@\1""")
_PLACEHOLDERS: dict[str, JSONValue] = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
_STRING_PLACEHOLDER = "..."
# The placeholders that are no plausible value of their own: a call holding one the conversation does not hold
# copied the prompt's example (repair/grounding). The others (1, true, [], {}) are common real values.
COPIED_EXAMPLES: tuple[JSONValue, ...] = (_PLACEHOLDERS["number"], _STRING_PLACEHOLDER)


def example_text(parameters: JSONValue, render: Callable[[dict[str, JSONValue]], str] | None = None, *,
                 hints: bool = True) -> str:
    """A tool's arguments as the prompts show them: its first two properties, each a type hint in angle
    brackets (`{"weight":<number>}`), or with `hints=False` a placeholder value (`{"weight":1.5}`). `render`
    writes an arguments object as the call format does (default: compact JSON); hints replace what it wrote."""
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
    """Whether a value is one of the hints the prompts' example shows in place of a value (a copied template),
    perhaps with the punctuation a model ran on with (`"<string>,"`); a text that goes on (`<string>x</string>`,
    a plist's) is a value."""
    return isinstance(value, str) and _HINT.fullmatch(value.strip().rstrip(",;.: ")) is not None
