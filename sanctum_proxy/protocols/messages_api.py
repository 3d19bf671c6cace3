"""The Anthropic Messages API (POST /v1/messages) as chat completions: request, answer and errors in its shape.

Fields served, ignored as client-only, and refused with a 400 are listed in docs/contract.md; any other field
passes to the upstream unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, NotRequired, TypedDict

import orjson

from sanctum_proxy.core.openai_chat import tool_call
from sanctum_proxy.core.shapes import ChatMessage, ContentPart, JSONObject, JSONValue, ToolCallWire
from sanctum_proxy.errors import InvalidRequest, ProxyError, shown
from sanctum_proxy.protocols.function_tools import chat_tools, unsupported
from sanctum_proxy.protocols.reply import Reply, arguments_object
from sanctum_proxy.protocols.system_messages import merge_system_messages

IGNORED = frozenset({"metadata", "thinking", "service_tier", "context_management", "inference_geo", "billing_policy",
                     "cache_control", "diagnostics", "fallback_credit_token", "fallbacks", "speed"})
STATEFUL = ("mcp_servers", "container", "compaction")
BILLING_HEADER = "x-anthropic-billing-header:"
TRANSLATED = frozenset({"model", "system", "messages", "tools", "tool_choice", "max_tokens", "temperature",
                        "top_p", "top_k", "stop_sequences", "stream", "sanctum", "output_config", "output_format",
                        "thread"})
MAX_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn",
                "content_filter": "refusal"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 422: "invalid_request_error",
               429: "rate_limit_error", 402: "billing_error", 504: "timeout_error", 529: "overloaded_error"}
# Anthropic's documented error types by status; the proxy's own 408 and 422 are invalid requests, other 5xx
# api_error.


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ThinkingBlock(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, JSONValue]


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock


class MessagesUsage(TypedDict):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: NotRequired[int]


class ThreadUnsupported(InvalidRequest):
    """`thread` refused as Anthropic does, so a client that threads by default sends the whole history instead."""

    code = "thread_unsupported_request"

    def extra(self) -> JSONObject:
        return {"details": {"error_code": self.code}}


def to_chat(body: JSONObject) -> JSONObject:
    """The chat-completions body for a Messages request (InvalidRequest naming the field it cannot serve)."""
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: a positive integer is required" if "max_tokens" in body
                             else "max_tokens: Field required", param="max_tokens")
    return chat_messages(body)


def chat_messages(body: JSONObject) -> JSONObject:
    """`to_chat` without the `max_tokens` check, for POST /v1/messages/count_tokens."""
    if body.get("thread") is not None and body.get("thread") is not False:
        raise ThreadUnsupported("'thread' is not supported: sanctum-proxy keeps no conversation state; send the "
                                "whole conversation without 'thread'", param="thread")
    for name in STATEFUL:
        if body.get(name):
            raise InvalidRequest(f"'{name}' is not supported: sanctum-proxy keeps no state on the server and serves "
                                 "client tools only", param=name)
    chat: JSONObject = {k: v for k, v in body.items() if k not in IGNORED and k not in TRANSLATED}
    chat["model"] = body.get("model")
    chat["messages"] = merge_system_messages(_system(body.get("system")) + _messages(body.get("messages")))
    answer_format = _output_format(body)
    if answer_format is not None:
        chat["response_format"] = answer_format
    tools = chat_tools(body.get("tools"), _function)
    if tools:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if choice is not None:
        _tool_choice(choice, chat)
    for key, target in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                        ("top_k", "top_k"), ("stop_sequences", "stop"), ("stream", "stream"),
                        ("sanctum", "sanctum")):
        if body.get(key) is not None:
            chat[target] = body[key]
    return chat


def _output_format(body: JSONObject) -> JSONObject | None:
    """`output_config.format` (or the older `output_format`) as the chat `response_format`."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise InvalidRequest("'output_config' must be an object", param="output_config")
    given, where = (config or {}).get("format"), "output_config.format"
    if given is None:
        given, where = body.get("output_format"), "output_format"
    if given is None:
        return None
    if not isinstance(given, dict) or given.get("type") != "json_schema" or not isinstance(given.get("schema"), dict):
        raise InvalidRequest(f"'{where}' must be {{\"type\": \"json_schema\", \"schema\": {{...}}}}", param=where)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": given["schema"], "strict": True}}


def _system(system: JSONValue, where: str = "system") -> list[ChatMessage]:
    """A system prompt as one chat message, less Claude Code's per-request billing block, which would defeat the prompt
    cache."""
    if system is None or system == "" or system == []:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list):
        texts = [_text_block(block, f"{where}[{i}]") for i, block in enumerate(system)]
        kept = [t for t in texts if not t.startswith(BILLING_HEADER)]
        return [{"role": "system", "content": "\n\n".join(kept)}] if kept else []
    raise InvalidRequest(f"'{where}' must be a string or an array of text blocks", param=where)


def _text_block(block: JSONValue, at: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise InvalidRequest(f"{at} must be a text block {{\"type\": \"text\", \"text\": ...}}", param=at)
    return str(block["text"])


def _messages(messages: JSONValue) -> list[ChatMessage]:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    out: list[ChatMessage] = []
    for i, message in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
            raise InvalidRequest(f"{at} must be an object with role 'user', 'assistant' or 'system'",
                                 param=f"{at}.role")
        content = message.get("content")
        if message["role"] == "system":  # Claude Code's, after the user's turn: merged in to_chat
            out += _system(content, f"{at}.content")
        elif isinstance(content, str):
            out.append({"role": message["role"], "content": content})
        elif isinstance(content, list):
            out += (_assistant if message["role"] == "assistant" else _user)(content, at)
        else:
            raise InvalidRequest(f"{at}.content must be a string or an array of content blocks",
                                 param=f"{at}.content")
    return out


def _assistant(blocks: list[Any], at: str) -> list[ChatMessage]:
    """Text and tool_use blocks as one assistant message."""
    texts: list[str] = []
    calls: list[JSONValue] = []
    for j, block in enumerate(blocks):
        where = f"{at}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_block(block, where))
        elif kind == "tool_use":
            calls.append(_call(block, where))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # chat upstreams take no reasoning back
        else:
            raise InvalidRequest(f"{where}: assistant blocks of type {shown(kind)} are not supported (text, tool_use, "
                                 "thinking)", param=f"{where}.type")
    message: ChatMessage = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _call(block: JSONObject, at: str) -> ToolCallWire:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise InvalidRequest(f"{at}: a tool_use block needs a string 'id' and 'name'", param=at)
    return tool_call(call_id, name, orjson.dumps(block.get("input") or {}).decode())


def _user(blocks: list[Any], at: str) -> list[ChatMessage]:
    """tool_result blocks as `tool` messages first, the rest (with the results' images) as one user message after."""
    results: list[ChatMessage] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(blocks):
        where = f"{at}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            result, images = _result(block, where)
            results.append(result)
            parts += images
        else:
            parts.append(_part(block, where))
    out = list(results)
    if parts:
        text_only = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "".join(p["text"] for p in parts) if text_only else parts})
    return out


def _part(block: Any, at: str) -> ContentPart:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return {"type": "text", "text": _text_block(block, at)}
    if kind == "image":
        source = block.get("source") if isinstance(block.get("source"), dict) else {}
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
        elif source.get("type") == "url" and isinstance(source.get("url"), str):
            url = source["url"]
        else:
            raise InvalidRequest(f"{at}: only base64 and url image sources are supported (sanctum-proxy keeps no "
                                 "files)", param=f"{at}.source")
        return {"type": "image_url", "image_url": {"url": url}}
    raise InvalidRequest(f"{at}: user blocks of type {shown(kind)} are not supported (text, image, tool_result)",
                         param=f"{at}.type")


def _result(block: JSONObject, at: str) -> tuple[ChatMessage, list[ContentPart]]:
    """The `tool` message, and the result's images."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise InvalidRequest(f"{at}: a tool_result block needs a string 'tool_use_id'", param=f"{at}.tool_use_id")
    content = block.get("content")
    images: list[ContentPart] = []
    if isinstance(content, list):
        parts = [_part(p, f"{at}.content[{j}]") for j, p in enumerate(content)]
        content = "".join(p["text"] for p in parts if p["type"] == "text")
        images = [p for p in parts if p["type"] != "text"]
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise InvalidRequest(f"{at}.content must be a string or an array of blocks", param=f"{at}.content")
    if block.get("is_error") is True:
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": call_id, "content": content}, images


def _function(i: int, tool: JSONValue) -> JSONObject:
    if not isinstance(tool, dict) or tool.get("type", "custom") not in ("custom", None):
        raise unsupported(i, tool, "client tools with an input_schema only")
    function: JSONObject = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return function


def _tool_choice(choice: Any, chat: JSONObject) -> None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise InvalidRequest(f"'tool_choice' {shown(choice)} is not supported (auto, any, tool, none)",
                             param="tool_choice")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


# The answer.

def content_blocks(reply: Reply) -> list[ContentBlock]:
    """A message's `content`: thinking, text, then each tool_use."""
    out: list[ContentBlock] = []
    if reply.reasoning:
        out.append(thinking_block(reply.reasoning))
    if answer_text(reply) or not reply.calls:
        out.append({"type": "text", "text": answer_text(reply)})
    out += [tool_use_block(c.id, c.name, arguments_object(c.arguments)) for c in reply.calls]
    return out


def answer_text(reply: Reply) -> str:
    """The answer's text, or the refusal of a model that declined."""
    return reply.text or reply.refusal


def thinking_block(text: str) -> ThinkingBlock:
    return {"type": "thinking", "thinking": text, "signature": ""}


def tool_use_block(call_id: str, name: str, arguments: dict[str, JSONValue]) -> ToolUseBlock:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def stop_reason(reply: Reply) -> str:
    if reply.calls:
        return "tool_use"
    return "refusal" if reply.refusal else STOP_REASONS.get(reply.finish_reason, "end_turn")


def usage(reply: Reply) -> MessagesUsage:
    """`input_tokens` excludes cached prompt tokens, which Anthropic counts as `cache_read_input_tokens`."""
    out: MessagesUsage = {"input_tokens": max(0, reply.input_tokens - reply.cached_tokens),
                          "output_tokens": reply.output_tokens}
    if reply.cached_tokens:
        out["cache_read_input_tokens"] = reply.cached_tokens
    return out


def message(reply: Reply, ids: str, model: str) -> JSONObject:
    """The Message; `model` is the one the client asked for, as a stream's message_start names it."""
    return {"id": f"msg_{ids}", "type": "message", "role": "assistant", "model": model,
            "content": content_blocks(reply), "stop_reason": stop_reason(reply), "stop_sequence": None,
            "usage": usage(reply)}


def error_body(error: ProxyError) -> JSONObject:
    """Anthropic's error shape, with the proxy's own type and code (and a surrender's details) beside it."""
    body = error.body()["error"]
    kind = ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    extra = {k: v for k, v in body.items() if k not in ("message", "type")}
    return {"type": "error", "error": {"type": kind, "message": error.message, "sanctum_type": body["type"],
                                       **extra}}


class ModelInfo(TypedDict):
    type: Literal["model"]
    id: str
    display_name: str
    created_at: str
    lifecycle: str


class ModelPage(TypedDict):
    data: list[ModelInfo]
    first_id: str | None
    last_id: str | None
    has_more: bool


def model_list(data: list[JSONObject]) -> ModelPage:
    """OpenAI's model list as Anthropic's one page of ModelInfo; a model without `created` gets the epoch."""
    models: list[ModelInfo] = []
    for item in data:
        model_id = item.get("id")
        if not isinstance(model_id, str):
            continue
        created = item.get("created")
        seconds = created if isinstance(created, int) and not isinstance(created, bool) and created >= 0 else 0
        stamp = datetime.fromtimestamp(min(seconds, MAX_TIMESTAMP), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        models.append({"type": "model", "id": model_id, "display_name": model_id, "created_at": stamp,
                       "lifecycle": "active"})
    return {"data": models, "first_id": models[0]["id"] if models else None,
            "last_id": models[-1]["id"] if models else None, "has_more": False}
