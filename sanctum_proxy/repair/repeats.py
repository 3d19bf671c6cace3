"""Calls the conversation has already answered: the agent-loop trap of small models.

A call equal to one a tool message answered is a repeat. Its next round drops tools and the repeat: given both,
a small model answers the correction, not the user.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from sanctum_proxy.core.calls import Problem, ToolCall, content_text
from sanctum_proxy.core.shapes import JSONValue

MAX_RESULT_CHARS = 600  # of a result quoted in the correction


def answered_calls(messages: JSONValue) -> dict[tuple[str, bytes], str]:
    """(name, canonical arguments) -> result text, for every answered call."""
    if not isinstance(messages, list):
        return {}
    asked: dict[str, tuple[str, bytes]] = {}
    answered: dict[tuple[str, bytes], str] = {}
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(call.get("id"), str):
                    asked[call["id"]] = (str(function.get("name")), canonical(function.get("arguments")))
        elif message.get("role") == "tool" and message.get("tool_call_id") in asked:
            answered[asked[message["tool_call_id"]]] = content_text(message.get("content"))
    return answered


def canonical(arguments: JSONValue) -> bytes:
    """Arguments as sorted-key JSON."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            return arguments.strip().encode()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(value).encode()


def repeated_call(calls: Sequence[ToolCall], messages: JSONValue, raw: Callable[[], str]) -> Problem | None:
    """A Problem when every call repeats an answered one; a new call beside a repeat passes."""
    if not calls:
        return None
    answered = answered_calls(messages)
    if not answered:
        return None
    results = [answered.get((c.name, canonical(c.arguments))) for c in calls]
    if any(r is None for r in results):
        return None
    said = tuple(f"The tool {c.name} already returned: {_excerpt(r or '')}"
                 for c, r in zip(calls, results, strict=True))
    question = _last_question(messages)
    ask = f"Using that result, answer my question: {question}" if question else "Using that result, answer me."
    names = {c.name for c in calls}
    return Problem("repeated_call", next(iter(names)) if len(names) == 1 else None, (*said, ask), raw())


def _last_question(messages: JSONValue) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _excerpt(content_text(message.get("content")))
    return ""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " ..."
