"""Constrained rounds: the answer schema the upstream is held to, and which constraint each round gets."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core.calls import Problem, example_text, new_call_id
from sanctum_proxy.core.shapes import ChatMessage, JSONObject
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair.grammar import GrammarTooLarge, gbnf
from sanctum_proxy.repair.loop_data import Answer, How, Mode, Plan
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import object_keys

Constrain = Literal["off", "repair", "always"]
SCHEMA_NAME = "sanctum_answer"
FORMAT = (
    "Answer with exactly one JSON object and nothing else:\n"
    '- to call a tool: {"name": "<tool name>", "arguments": {<arguments as the tool\'s schema says>}}, '
    'for example {"name": "%s", "arguments": %s}\n'
)
_PARALLEL = '- to call several tools at once: {"tool_calls": [{"name": ..., "arguments": ...}, ...]}\n'
_TEXT = '- to answer in text, when no tool is needed: {"content": "<your answer>"}\n'


def answer_schema(book: Toolbox, *, text: bool, parallel: bool) -> JSONObject:
    """The JSON Schema of an answer offering every tool in `book`."""
    calls = [_call_schema(name, tool.parameters) for name, tool in book.tools.items()]
    one_call: JSONObject = calls[0] if len(calls) == 1 else {"anyOf": calls}
    branches = [one_call]
    if parallel:
        branches.append(
            {
                "type": "object",
                "properties": {"tool_calls": {"type": "array", "items": one_call, "minItems": 1}},
                "required": ["tool_calls"],
                "additionalProperties": False,
            }
        )
    if text:
        branches.append(
            {
                "type": "object",
                "properties": {"content": {"type": "string"}},
                "required": ["content"],
                "additionalProperties": False,
            }
        )
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _call_schema(name: str, parameters: JSONObject) -> JSONObject:
    arguments = parameters if parameters else {"type": "object", "properties": {}}
    if "additionalProperties" not in arguments and object_keys(arguments, top=True).others is False:
        arguments = {**arguments, "additionalProperties": False}  # closed, as validation reads it
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def response_format(schema: JSONObject) -> JSONObject:
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True}}


def is_constrained(body: JSONObject) -> bool:
    """Whether this upstream body is one of our constrained rounds."""
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and (fmt.get("json_schema") or {}).get("name") == SCHEMA_NAME


def asks_json(body: JSONObject) -> bool:
    """Whether the client asked for JSON of its own, never read for calls."""
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema") and not is_constrained(body)


def format_section(book: Toolbox, *, text: bool, parallel: bool, hints: bool = False) -> str:
    """The system prompt's call-format paragraph; `hints` shows type hints."""
    first = next(iter(book.tools.values()))
    return (FORMAT % (first.name, example_text(first.parameters, hints=hints)) + (_PARALLEL if parallel else "")
            + (_TEXT if text else ""))


def decode(message: ChatMessage, new_id: Callable[[], str] | None = None) -> ChatMessage:
    """The OpenAI message an answer object stands for; anything else unchanged."""
    content = message.get("content")
    if message.get("tool_calls") or not isinstance(content, str):
        return message
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:  # cut by max_tokens: a text branch is its text so far
        return {**message, "content": visible_text(content)} if _TEXT_OPENING.match(content) else message
    if not isinstance(answer, dict):
        return message
    make_id = new_id or new_call_id
    if set(answer) == {"content"} and isinstance(answer["content"], str):
        return {**message, "content": answer["content"]}
    calls = answer.get("tool_calls") if set(answer) == {"tool_calls"} else [answer]
    if not isinstance(calls, list) or not calls or not all(_is_call(c) for c in calls):
        return message
    return {
        **message,
        "content": None,
        "tool_calls": [oc.tool_call(make_id(), c["name"], orjson.dumps(c["arguments"]).decode()) for c in calls],
    }


def _is_call(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str) and "arguments" in value


def broken_call(message: ChatMessage, finish_reason: str | None) -> Problem | None:
    """A call-branch answer that is not whole JSON, as a malformed call."""
    content = message.get("content")
    if message.get("tool_calls") or not isinstance(content, str) or not _CALL_OPENING.match(content):
        return None
    try:
        orjson.loads(content)
        return None
    except orjson.JSONDecodeError:
        pass
    named = _NAME.match(content)
    try:
        tool = orjson.loads(f'"{named.group(1)}"') if named else None
    except orjson.JSONDecodeError:
        tool = None
    why = "the answer was cut off by max_tokens" if finish_reason == "length" else "the answer is not complete JSON"
    return Problem("malformed_json", tool, (why,), content)


_CALL_OPENING = re.compile(r'\s*\{\s*"(?:name|tool_calls)"\s*:')
_NAME = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_TEXT_OPENING = re.compile(r'\s*\{\s*"content"\s*:\s*"')


def visible_text(raw: str) -> str:
    """A text-branch answer's text so far; "" while it may be a call."""
    opening = _TEXT_OPENING.match(raw)
    if opening is None:
        return ""
    body = raw[opening.end() :]
    end = _closing_quote(body)
    body = body[:end] if end is not None else body[:_safe_end(body)]
    try:
        text: str = orjson.loads(f'"{body}"')
    except orjson.JSONDecodeError:  # a control character got through
        return ""
    return text


MAX_OPENING_CHARS = 4096  # little whitespace may precede `{"content": "`


class TextBranch:
    """`visible_text` for a stream, reading each character once."""

    def __init__(self) -> None:
        self._buffer = ""  # the opening so far, or a cut escape
        self._opened = self._done = False

    def feed(self, piece: str) -> str:
        if self._done or not piece:
            return ""
        self._buffer += piece
        if not self._opened:
            opening = _TEXT_OPENING.match(self._buffer)
            if opening is None:
                self._done = len(self._buffer) > MAX_OPENING_CHARS
                return ""
            self._opened, self._buffer = True, self._buffer[opening.end():]
        body = self._buffer
        end = _closing_quote(body)
        if end is not None:
            body, self._done = body[:end], True
        else:
            body = body[:_safe_end(body)]
        try:
            text: str = orjson.loads(f'"{body}"')
        except orjson.JSONDecodeError:  # a control character got through
            self._done = True
            return ""
        self._buffer = self._buffer[len(body):]
        return text


_HIGH_SURROGATE_END = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}$")
_PARTIAL_U = re.compile(r"\\u[0-9a-fA-F]{0,3}$")


def _safe_end(body: str) -> int:
    """Where an unfinished string body stops being decodable."""
    end = len(body)
    if _escaping(body, end):
        end -= 1
    else:
        partial = _PARTIAL_U.search(body)
        if partial is not None and not _escaping(body, partial.start()):
            end = partial.start()
    surrogate = _HIGH_SURROGATE_END.search(body, 0, end)
    if surrogate is not None and not _escaping(body, surrogate.start()):
        end = surrogate.start()
    return end


def _escaping(body: str, at: int) -> bool:
    """Whether the backslashes just before `at` leave one open."""
    run = at - len(body[:at].rstrip("\\"))
    return run % 2 == 1


def _closing_quote(body: str) -> int | None:
    at = 0
    while (at := body.find('"', at)) >= 0:
        before = at - 1
        while before >= 0 and body[before] == "\\":
            before -= 1
        if (at - 1 - before) % 2 == 0:
            return at
        at += 1
    return None


@dataclass(frozen=True)
class Constraint:
    """How one round's decoding is constrained; `json_prompt` rewrites the prompt for answer objects."""

    book: Toolbox
    text: bool
    parallel: bool
    how: How = "schema"
    json_prompt: bool = True
    grammar: str | None = None
    prompt: tuple[Toolbox, bool, bool] | None = None  # json_prompt: (tools, text, parallel)
    prompted: bool = False  # a native request's correction sent prompted

    @property
    def answer_object(self) -> bool:
        """The answer is the JSON answer object."""
        return self.how == "schema"

    def schema(self) -> JSONObject:
        return answer_schema(self.book, text=self.text, parallel=self.parallel)


@dataclass(frozen=True)
class Stage:
    """The part of loop.State the choice reads."""

    mode: Mode
    corrected: bool
    pin: str | None = None
    fresh: bool = False
    refused: bool = False


def transcript(turns: Sequence[ChatMessage], constraint: Constraint | None,
               constrained_from: int | None) -> list[ChatMessage]:
    """The hidden turns a round is sent; JSON-prompt rounds drop unconstrained rounds' turns."""
    if constraint is None or not constraint.json_prompt or constrained_from is None:
        return list(turns)
    return list(turns[constrained_from:])


def chosen(plan: Plan, stage: Stage) -> Constraint | None:
    """tool_choice for native corrections, a grammar or schema for prompted ones, or None."""
    book = plan.book
    if book is None or not book.tools or plan.constrain == "off" or stage.refused:
        return None
    first_round_too = plan.constrain == "always" and stage.mode == "prompted"
    if "response_format" in plan.body or not (stage.corrected or first_round_too):
        return None
    required = plan.required
    if required not in (None, "any") and required in book.tools:
        book = book.restricted_to(required)
    offered = book
    if offered is plan.book and stage.pin is not None:
        book = book.restricted_to(stage.pin)
    free = required is None and stage.pin is None
    parallel = plan.parallel and stage.pin is None
    if first_round_too:  # a pin narrows only the schema, never the prompt
        return Constraint(book, text=free, parallel=parallel, prompt=(offered, required is None, plan.parallel))
    if plan.correction_context == "fresh" or stage.fresh:
        return Constraint(book, text=free, parallel=parallel)
    if stage.mode == "native" and plan.native_calls is False:  # the template drops the tools
        return _prompted(plan, book, free, parallel, switched=True)
    if stage.mode == "native":
        if not plan.tool_choice:
            return None
        return Constraint(plan.book or book, text=False, parallel=plan.parallel, how="tool_choice", json_prompt=False)
    return _prompted(plan, book, free, parallel)


def _prompted(plan: Plan, book: Toolbox, free: bool, parallel: bool, switched: bool = False) -> Constraint | None:
    """A grammar where the upstream takes one, else the schema."""
    try:
        grammar = gbnf(book, plan.prompt_format, text=free, parallel=parallel,
                       limit=plan.max_grammar_bytes) if plan.grammar else None
    except GrammarTooLarge:  # found while building: never built whole
        return None  # over budget: unconstrained, as its record says
    if grammar is not None and len(grammar) > plan.max_grammar_bytes:
        return None  # over budget: unconstrained rather than huge
    if grammar is not None:
        return Constraint(book, text=free, parallel=parallel, how="grammar", json_prompt=False, grammar=grammar,
                          prompted=switched)
    return Constraint(book, text=free, parallel=parallel, json_prompt=False, prompted=switched)


def decoded(answer: Answer, constraint: Constraint | None, plan: Plan) -> Answer:
    if constraint is None or not constraint.answer_object:
        return answer
    return replace(answer, message=decode(answer.message, plan.new_id))


_SCHEMA_REFUSAL = ("response_format", "grammar", "schema")  # "schema" covers json_schema


def tool_choice_refused(error: UpstreamError) -> bool:
    """vLLM before 0.8 and llama.cpp without --jinja refuse tool_choice "required" in words like these."""
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(w in text for w in ("tool_choice", "tool choice", "named tools"))


def schema_refused(error: UpstreamError) -> bool:
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(word in text for word in _SCHEMA_REFUSAL)
