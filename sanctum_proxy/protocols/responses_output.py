"""A chat answer as the Responses API's `response` object and its output items."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypedDict

from sanctum_proxy.core.shapes import JSONObject, JSONValue
from sanctum_proxy.protocols.reply import Reply


class LogProb(TypedDict):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: NotRequired[list[LogProb]]


class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[JSONValue]
    logprobs: list[LogProb]


class Refusal(TypedDict):
    type: Literal["refusal"]
    refusal: str


class ReasoningText(TypedDict):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(TypedDict):
    type: Literal["reasoning"]
    id: str
    summary: list[JSONValue]
    content: list[ReasoningText]


class MessageItem(TypedDict):
    type: Literal["message"]
    id: str
    status: str
    role: Literal["assistant"]
    content: list[OutputText | Refusal]


class FunctionCallItem(TypedDict):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: str
    namespace: NotRequired[str]


OutputItem = ReasoningItem | MessageItem | FunctionCallItem


class ResponsesUsage(TypedDict):
    input_tokens: int
    input_tokens_details: dict[str, int]  # cached_tokens, cache_write_tokens
    output_tokens: int
    output_tokens_details: dict[str, int]  # reasoning_tokens
    total_tokens: int


def output_items(reply: Reply, ids: str, *, logprobs: bool = False,
                 namespaced: dict[str, tuple[str, str]] | None = None) -> list[OutputItem]:
    """A response's `output`: reasoning, the message (a refusal as a `refusal` part), then each function call."""
    out: list[OutputItem] = []
    if reply.reasoning:
        out.append(reasoning_item(reply.reasoning, ids))
    parts: list[OutputText | Refusal] = []
    if reply.text or not (reply.calls or reply.refusal):
        parts.append(text_part(reply.text, response_logprobs(reply.logprobs) if logprobs else []))
    if reply.refusal:
        parts.append(refusal_part(reply.refusal))
    if parts:
        out.append({**message_item(None, ids, "completed"), "content": parts})
    out += [call_item(call.id, call.name, call.arguments, "completed", namespaced) for call in reply.calls]
    return out


def reasoning_item(text: str | None, ids: str) -> ReasoningItem:
    """A reasoning item; `text` None is its empty start in a stream."""
    return {"type": "reasoning", "id": f"rs_{ids}", "summary": [],
            "content": [] if text is None else [reasoning_part(text)]}


def reasoning_part(text: str) -> ReasoningText:
    return {"type": "reasoning_text", "text": text}


def message_item(text: str | None, ids: str, status: str) -> MessageItem:
    content: list[OutputText | Refusal] = [] if text is None else [text_part(text)]
    return {"type": "message", "id": f"msg_{ids}", "status": status, "role": "assistant", "content": content}


def text_part(text: str, logprobs: list[LogProb] | None = None) -> OutputText:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def refusal_part(text: str) -> Refusal:
    return {"type": "refusal", "refusal": text}


def response_logprobs(tokens: Any) -> list[LogProb]:
    """Chat token logprobs as the Responses API's `LogProb`s."""
    out: list[LogProb] = []
    for token in tokens or ():
        if not isinstance(token, dict) or not isinstance(token.get("token"), str):
            continue
        tops = [_logprob(t) for t in token.get("top_logprobs") or () if isinstance(t, dict)
                and isinstance(t.get("token"), str)]
        out.append({**_logprob(token), "top_logprobs": tops})
    return out


def _logprob(token: JSONObject) -> LogProb:
    raw, value, text = token.get("bytes"), token.get("logprob"), token.get("token")
    text = text if isinstance(text, str) else ""
    return {"token": text, "logprob": value if isinstance(value, int | float) else 0.0,
            "bytes": raw if isinstance(raw, list) else list(text.encode())}


def call_item(call_id: str, name: str, arguments: str, status: str,
              namespaced: dict[str, tuple[str, str]] | None = None) -> FunctionCallItem:
    """A function_call item; a namespaced function's with its own `name` and its `namespace`."""
    item: FunctionCallItem = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}
    if namespaced and name in namespaced:
        item["namespace"], item["name"] = namespaced[name]
    return item


def usage(reply: Reply) -> ResponsesUsage:
    return {"input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": reply.output_tokens, "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": reply.input_tokens + reply.output_tokens}


def skeleton(request: JSONObject, ids: str, created: int, model: str) -> JSONObject:
    """The response object before its output, status in_progress."""
    listed = request.get("tools")
    tools = [{**t, "strict": t.get("strict"), "parameters": t.get("parameters")} if t.get("type") == "function"
             else t for t in (listed if isinstance(listed, list) else ())
             if isinstance(t, dict)]  # the spec requires both keys
    return {"id": f"resp_{ids}", "object": "response", "created_at": created, "status": "in_progress",
            "error": None, "incomplete_details": None, "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"), "model": model, "output": [],
            "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
            "previous_response_id": None, "reasoning": request.get("reasoning"), "store": False,
            "temperature": request.get("temperature"), "text": request.get("text") or {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice") or "auto", "tools": tools,
            "top_p": request.get("top_p"), "truncation": request.get("truncation") or "disabled",
            "metadata": request.get("metadata") or {}}  # no usage yet; the spec has no null


def finished(response: JSONObject, reply: Reply, output: Sequence[OutputItem]) -> JSONObject:
    """The response once answered: `completed`, or `incomplete` at max_output_tokens."""
    cut = reply.finish_reason == "length"
    return {**response, "status": "incomplete" if cut else "completed", "output": output,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "usage": usage(reply),
            "model": reply.model or response["model"]}  # the upstream's own model


def failed(response: JSONObject, message: str, kind: str | None, param: str | None) -> JSONObject:
    """The response a stream ends with when the request fails after it started."""
    return {**response, "status": "failed",
            "error": {"code": "server_error", "message": message, "type": kind, "param": param}}
