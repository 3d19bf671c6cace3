"""Ollama's native chat API (POST /api/chat) as chat completions: the request as a chat body, the round loop's
answer as Ollama's final object, errors as `{"error": "<text>"}`. Pure: no I/O.

History in Ollama's shape is paired: calls without ids get ids, a tool result names its call by `tool_name`.
Options with a chat equivalent become chat fields (for a /v1 upstream); every native field with none (`options`,
`keep_alive`, `format`, `think`, ...) rides under OLLAMA_FIELDS as the client sent it, for Ollama's own /api/chat.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from sanctum_proxy.core.shapes import OLLAMA_FIELDS, ChatMessage, ContentPart, JSONObject, JSONValue, ToolCallWire
from sanctum_proxy.errors import InvalidRequest, ProxyError, shown
from sanctum_proxy.protocols.reply import Reply, arguments_object

TRANSLATED = frozenset({"model", "messages", "tools", "stream", "sanctum"})
# options -> the chat field a /v1 upstream (llama-server, vLLM, LM Studio) reads
OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
           "stop": "stop", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
           "repeat_penalty": "repeat_penalty", "num_predict": "max_tokens"}
IMAGE_TYPES = {"iVBOR": "image/png", "/9j/": "image/jpeg", "R0lG": "image/gif", "UklG": "image/webp"}


def to_chat(body: JSONObject) -> JSONObject:
    """The chat-completions body for an /api/chat request (InvalidRequest naming the field it cannot read)."""
    chat: JSONObject = {"model": body.get("model"), "messages": _messages(body.get("messages"))}
    tools = body.get("tools")
    if tools is not None:
        chat["tools"] = tools
    chat["stream"] = body.get("stream", True) is not False  # Ollama streams unless told not to
    if "sanctum" in body:
        chat["sanctum"] = body["sanctum"]
    native = {k: v for k, v in body.items() if k not in TRANSLATED}
    options = native.get("options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest(f"options: an object is required, got {shown(options)}", param="options")
    for name, field in OPTIONS.items():
        value = (options or {}).get(name)
        if value is not None and not (name == "num_predict" and (not isinstance(value, int) or value < 0)):
            chat[field] = value
    answer_format = _format(native.get("format"))
    if answer_format is not None:
        chat["response_format"] = answer_format
    think = native.get("think")
    if isinstance(think, str):
        chat["reasoning_effort"] = think
    if native:
        chat[OLLAMA_FIELDS] = native
    return chat


def _format(value: JSONValue) -> JSONObject | None:
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value}}
    raise InvalidRequest(f'format: "json" or a JSON schema object is required, got {shown(value)}', param="format")


def _messages(messages: JSONValue) -> list[ChatMessage]:
    if not isinstance(messages, list):
        raise InvalidRequest("messages: an array is required", param="messages")
    out: list[ChatMessage] = []
    pending: list[tuple[str, str]] = []  # (id, name) of the last assistant turn's calls not yet answered
    for i, message in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{at}: an object is required", param=at)
        role = message.get("role")
        if role == "assistant":
            chat, pending = _assistant(message, i)
        elif role == "tool":
            chat = {"role": "tool", "content": _text(message.get("content"), at),
                    "tool_call_id": _paired(message, pending, i)}
        else:
            chat = {"role": role, "content": _content(message, at)}  # type: ignore[typeddict-item]
        out.append(chat)
    return out


def _assistant(message: JSONObject, turn: int) -> tuple[ChatMessage, list[tuple[str, str]]]:
    at = f"messages[{turn}]"
    chat: ChatMessage = {"role": "assistant", "content": _text(message.get("content"), at)}
    thinking = message.get("thinking")
    if isinstance(thinking, str) and thinking:
        chat["reasoning_content"] = thinking
    listed = message.get("tool_calls")
    if listed is None:
        return chat, []
    if not isinstance(listed, list):
        raise InvalidRequest(f"{at}.tool_calls: an array is required", param=f"{at}.tool_calls")
    calls: list[ToolCallWire] = []
    for j, call in enumerate(listed):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest(f"{at}.tool_calls[{j}].function.name: a string is required",
                                 param=f"{at}.tool_calls[{j}]")
        given = call.get("id") if isinstance(call, dict) else None
        arguments = function.get("arguments")
        calls.append({"id": given if isinstance(given, str) and given else f"call_{turn}_{j}", "type": "function",
                      "function": {"name": function["name"], "arguments": arguments if isinstance(arguments, str)
                                   else orjson.dumps(arguments if arguments is not None else {}).decode()}})
    if calls:
        chat["tool_calls"] = calls
    return chat, [(c["id"], c["function"]["name"]) for c in calls]


def _paired(message: JSONObject, pending: list[tuple[str, str]], turn: int) -> str:
    """The id of the call a tool result answers: its own `tool_call_id`, else the first unanswered call of its
    `tool_name`, else the first unanswered call."""
    given = message.get("tool_call_id")
    name = message.get("tool_name")
    for k, (call_id, call_name) in enumerate(pending):
        if call_id == given or (not isinstance(given, str) and (name is None or call_name == name)):
            del pending[k]
            return call_id
    return given if isinstance(given, str) and given else f"call_{turn}_result"


def _text(content: JSONValue, at: str) -> str:
    if content is None:
        return ""
    if not isinstance(content, str):
        raise InvalidRequest(f"{at}.content: a string is required, got {shown(content)}", param=f"{at}.content")
    return content


def _content(message: JSONObject, at: str) -> str | list[ContentPart]:
    text = _text(message.get("content"), at)
    images = message.get("images")
    if not images:
        return text
    if not isinstance(images, list) or not all(isinstance(image, str) for image in images):
        raise InvalidRequest(f"{at}.images: an array of base64 strings is required", param=f"{at}.images")
    parts: list[ContentPart] = [{"type": "text", "text": text}] if text else []
    for image in images:
        kind = next((t for magic, t in IMAGE_TYPES.items() if image.startswith(magic)), "image/png")
        parts.append({"type": "image_url", "image_url": {"url": f"data:{kind};base64,{image}"}})
    return parts


def message(reply: Reply) -> JSONObject:
    """The answer's message in Ollama's shape: arguments as objects."""
    out: JSONObject = {"role": "assistant", "content": reply.text or reply.refusal}
    if reply.reasoning:
        out["thinking"] = reply.reasoning
    if reply.calls:
        out["tool_calls"] = [{"id": call.id, "function": {"index": i, "name": call.name,
                                                          "arguments": arguments_object(call.arguments)}}
                             for i, call in enumerate(reply.calls)]
    return out


def done_reason(reply: Reply) -> str:
    return "length" if reply.finish_reason == "length" else "stop"


DURATIONS = ("load_duration", "prompt_eval_duration", "eval_duration")


def metrics(reply: Reply, total_ns: int, native: object = None) -> JSONObject:
    """Ollama's counters: the tokens of every round the proxy sent, its own wall time, and the answering round's
    durations where an Ollama upstream said them (`native`: its OLLAMA_FIELDS)."""
    out: JSONObject = {"total_duration": total_ns}
    if isinstance(native, dict):
        out.update((k, native[k]) for k in DURATIONS if isinstance(native.get(k), int))
    return {**out, "prompt_eval_count": reply.input_tokens, "eval_count": reply.output_tokens}


def created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def answer(reply: Reply, model: str, total_ns: int, native: object = None) -> JSONObject:
    return {"model": model, "created_at": created_at(), "message": message(reply), "done_reason": done_reason(reply),
            "done": True, **metrics(reply, total_ns, native)}


def error_body(error: ProxyError) -> JSONObject:
    return {"error": error.message}


def tag(model: JSONObject) -> dict[str, Any]:
    """A /v1/models entry as an /api/tags one (what an upstream that lists only OpenAI's shape says)."""
    name = str(model.get("id") or model.get("name") or "")
    return {"name": name, "model": name, "modified_at": "1970-01-01T00:00:00Z", "size": 0, "digest": "",
            "details": {"format": "", "family": "", "families": None, "parameter_size": "", "quantization_level": ""}}
