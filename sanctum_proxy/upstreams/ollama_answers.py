"""Ollama's `/api/chat` answers as chat completions, NDJSON lines as chunks, errors as UpstreamError. Pure.

Ollama-only fields (durations, created_at) go under OLLAMA_FIELDS. A required-call round's content comes back as its
calls.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from sanctum_proxy.core.calls import new_call_id
from sanctum_proxy.core.shapes import OLLAMA_FIELDS, ChatMessage, JSONObject, JSONValue
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair import constrain as cn

METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
           "eval_duration")
FINGERPRINT = "fp_ollama"
MAX_ERROR_TEXT = 2000


def completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def created(answer: JSONObject) -> int:
    """`created_at` (RFC 3339) as Unix seconds; 0 when missing or unreadable."""
    stamp = answer.get("created_at")
    if not isinstance(stamp, str):
        return 0
    try:
        return int(datetime.fromisoformat(stamp).timestamp())
    except ValueError:
        return 0


def metrics(answer: JSONObject) -> JSONObject:
    """Fields a chat completion has no place for (durations in nanoseconds)."""
    kept: JSONObject = {k: answer[k] for k in ("created_at", "done_reason", *METRICS) if k in answer}
    return kept


def usage(answer: JSONObject) -> JSONObject | None:
    prompt, completion = answer.get("prompt_eval_count"), answer.get("eval_count")
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return None
    prompt = prompt if isinstance(prompt, int) else 0
    completion = completion if isinstance(completion, int) else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_calls(calls: JSONValue, start: int = 0) -> list[JSONObject]:
    """Ollama's calls as OpenAI's: ids made up where missing, arguments as JSON text."""
    out: list[JSONObject] = []
    for offset, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments if arguments is not None
                                                                          else {}).decode()
        given = call.get("id") if isinstance(call, dict) else None
        out.append({"index": start + offset, "id": given if isinstance(given, str) and given else new_call_id(),
                    "type": "function", "function": {"name": function.get("name") or "", "arguments": text}})
    return out


def finish_reason(done_reason: JSONValue, calls: bool) -> str:
    reason = done_reason if isinstance(done_reason, str) and done_reason else "stop"
    return "tool_calls" if calls and reason == "stop" else reason


def completion(answer: JSONObject, calls_in_content: bool = False) -> JSONObject:
    said = answer.get("message")
    said = said if isinstance(said, dict) else {}
    content = said.get("content")
    message: ChatMessage = {"role": "assistant", "content": content if isinstance(content, str) else ""}
    if isinstance(said.get("thinking"), str) and said["thinking"]:
        message["reasoning_content"] = said["thinking"]
    calls = chat_calls(said.get("tool_calls"))
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    elif calls_in_content:
        message = cn.decode(message)
    body: JSONObject = {
        "id": completion_id(), "object": "chat.completion", "created": created(answer), "model": answer.get("model"),
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish_reason(answer.get("done_reason"), bool(message.get("tool_calls")))}],
        OLLAMA_FIELDS: metrics(answer),
    }
    if (counted := usage(answer)) is not None:
        body["usage"] = counted
    return body


@dataclass
class Chunks:
    """One stream's lines as chunks: one id, the role once, call indices counted across lines."""

    calls_in_content: bool = False
    id: str = field(default_factory=completion_id)
    _role_sent: bool = False
    _calls: int = 0
    _held: list[str] = field(default_factory=list)
    done: bool = False

    def of(self, line: JSONObject) -> list[JSONObject]:
        """The chunks one NDJSON line stands for."""
        said = line.get("message")
        said = said if isinstance(said, dict) else {}
        delta: JSONObject = {}
        if not self._role_sent:
            delta["role"], self._role_sent = "assistant", True
        if isinstance(said.get("thinking"), str) and said["thinking"]:
            delta["reasoning_content"] = said["thinking"]
        content = said.get("content")
        if isinstance(content, str) and content:
            if self.calls_in_content:
                self._held.append(content)
            else:
                delta["content"] = content
        calls = chat_calls(said.get("tool_calls"), self._calls)
        if calls:
            delta["tool_calls"] = calls
            self._calls += len(calls)
        if line.get("done") is True:
            self.done = True
            delta.update(self._decoded_held())
        out = [self._chunk(line, delta)] if delta else []
        if self.done:
            out.append(self._chunk(line, {}, finish_reason(line.get("done_reason"), self._calls > 0)))
            out[-1][OLLAMA_FIELDS] = metrics(line)
            if (counted := usage(line)) is not None:
                out.append({**self._meta(line), "choices": [], "usage": counted})
        return out

    def _decoded_held(self) -> JSONObject:
        """A required-call round's held content as calls, or as text where it is no answer object."""
        if not self._held:
            return {}
        message = cn.decode({"role": "assistant", "content": "".join(self._held)})
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            listed = [{"index": self._calls + i, **c} for i, c in enumerate(calls) if isinstance(c, dict)]
            self._calls += len(listed)
            return {"tool_calls": listed}
        return {"content": message.get("content") or ""}

    def _meta(self, line: JSONObject) -> JSONObject:
        return {"id": self.id, "object": "chat.completion.chunk", "created": created(line), "model": line.get("model"),
                "system_fingerprint": FINGERPRINT}

    def _chunk(self, line: JSONObject, delta: JSONObject, finish: str | None = None) -> JSONObject:
        return {**self._meta(line), "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def error_of(status: int, body: bytes) -> UpstreamError:
    """An `/api/chat` error as UpstreamError; a body of another shape keeps its text."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    message = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(message, str):
        text = body.decode("utf-8", "replace").strip()[:MAX_ERROR_TEXT]
        return UpstreamError(status, text or "upstream error with an empty body", None)
    message = _clip(message)
    return UpstreamError(status, message, {"error": message})


def line_error(line: JSONObject) -> UpstreamError | None:
    """The error line Ollama writes once its stream began, in place of a 500."""
    said = line.get("error")
    if said is None or said == "":
        return None
    message = _clip(said if isinstance(said, str) else orjson.dumps(said).decode())
    return UpstreamError(500, message, {"error": message})


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "..."
