"""The round loop's answer as the translated protocols read it: text, calls, reasoning, why it ended, tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..calls import content_text


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str  # the JSON text of the arguments object


@dataclass(frozen=True)
class Reply:
    text: str
    calls: tuple[Call, ...]
    reasoning: str
    finish_reason: str  # the chat finish_reason: stop | tool_calls | length | content_filter | ...
    input_tokens: int
    output_tokens: int

    @classmethod
    def of(cls, message: dict[str, Any], finish_reason: str, usage: dict[str, Any] | None,
           accepted: dict[str, Any] | None = None) -> Reply:
        """`accepted`: the accepted round's raw answer, whose reasoning the repaired message drops."""
        reasoning = next((m.get(f) for m in (message, accepted or {}) for f in ("reasoning_content", "reasoning")
                          if isinstance(m.get(f), str) and m.get(f)), None)
        calls = tuple(_call(c, i) for i, c in enumerate(message.get("tool_calls") or []) if isinstance(c, dict))
        usage = usage or {}
        return cls(content_text(message.get("content")), calls, reasoning if isinstance(reasoning, str) else "",
                   finish_reason, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")))


def _call(call: dict[str, Any], index: int) -> Call:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
    return Call(str(call.get("id") or f"call_{index}"), str(function.get("name") or ""), arguments or "{}")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments as an object (the loop only lets valid JSON objects through; {} otherwise)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
