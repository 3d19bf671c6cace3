"""Constrained tool calling: one JSON Schema for "an answer", so the upstream's grammar does the syntax.

An answer object is a text reply, one call or several, sent as `response_format` json_schema. Constrained rounds
are prompted: llama.cpp ignores tool parsing beside `response_format` and rejects `grammar` beside `tools`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import orjson

from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core.calls import Problem, example_text, new_call_id
from sanctum_proxy.core.shapes import ChatMessage, JSONObject
from sanctum_proxy.repair.reading import object_keys
from sanctum_proxy.repair.toolbox import Toolbox

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
