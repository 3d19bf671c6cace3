"""The client's replayed calls made readable before an upstream parses them: arguments that are not JSON mended,
or, where they cannot be read, the call and its results written as text (the prompted form)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import cast

import orjson

from sanctum_proxy.core import decoded_json, lenient_json
from sanctum_proxy.core import omens as om
from sanctum_proxy.core.shapes import ChatMessage, JSONObject, JSONValue
from sanctum_proxy.repair import prompted


@dataclass(frozen=True)
class Mended:
    """One call's arguments: mended JSON text, or None where they cannot be read."""

    index: int  # in the assistant message's tool_calls
    arguments: str | None
    omen: om.Omen


def mended(body: JSONObject, fmt: str) -> tuple[JSONObject, tuple[om.Omen, ...]]:
    """`body` with every history call readable, an omen per change; unchanged messages stay the same objects."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, ()
    out: list[JSONValue] = []
    omens: list[om.Omen] = []
    at = 0
    while at < len(messages):
        message = messages[at]
        fixes = _fixes(at, message)
        if not fixes:
            out.append(message)
            at += 1
            continue
        assert isinstance(message, dict)  # _fixes reads only assistant messages
        omens += [f.omen for f in fixes]
        if all(f.arguments is not None for f in fixes):
            out.append(_with_arguments(message, fixes))
            at += 1
            continue
        end = _results_end(messages, at)
        out += cast("list[JSONValue]", prompted.rewrite_history(cast("list[ChatMessage]", messages[at:end]), fmt))
        at = end
    if not omens:
        return body, ()
    return {**body, "messages": out}, tuple(omens)


def _fixes(position: int, message: JSONValue) -> list[Mended]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    fixes = []
    for index, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str) or not arguments.strip() or _reads(arguments):
            continue
        assert isinstance(call, dict) and isinstance(function, dict)
        decoded = lenient_json.decode(arguments)
        readable = isinstance(decoded, decoded_json.Decoded) and isinstance(decoded.value, dict)
        repairs = list(decoded.repairs) if isinstance(decoded, decoded_json.Decoded) and readable else []
        text = orjson.dumps(decoded.value).decode() if readable else None  # type: ignore[union-attr]
        omen = om.history_mended(position, str(function.get("name") or ""), str(call.get("id") or ""),
                                 repairs, arguments, as_text=not readable)
        fixes.append(Mended(index, text, omen))
    return fixes


def _reads(arguments: str) -> bool:
    """Strict JSON, as vLLM's json.loads and llama.cpp read it."""
    return _short_reads(arguments) if len(arguments) <= MEMO_CHARS else _strict(arguments)


MEMO_CHARS = 4096


@functools.lru_cache(maxsize=1024)  # a conversation's calls come back every turn
def _short_reads(arguments: str) -> bool:
    return _strict(arguments)


def _strict(arguments: str) -> bool:
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    return True


def _with_arguments(message: JSONObject, fixes: list[Mended]) -> JSONObject:
    calls = list(cast("list[JSONObject]", message["tool_calls"]))
    for fix in fixes:
        call = calls[fix.index]
        function = cast("JSONObject", call["function"])
        calls[fix.index] = {**call, "function": {**function, "arguments": fix.arguments}}
    return {**message, "tool_calls": calls}


def _results_end(messages: list[JSONValue], at: int) -> int:
    """The end of the tool results that follow the assistant message at `at`."""
    end = at + 1
    while end < len(messages) and isinstance(messages[end], dict) and \
            cast("JSONObject", messages[end]).get("role") in ("tool", "function"):
        end += 1
    return end
