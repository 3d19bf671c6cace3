"""The OpenAI chat shapes the proxy writes, and builders that write their keys in wire order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, cast

# Native Ollama fields carried in a chat body or answer (core/shapes.OLLAMA_FIELDS): never in an OpenAI answer.
OLLAMA_FIELDS = "sanctum_ollama"
INTERNAL = frozenset({"sanctum", OLLAMA_FIELDS})

if TYPE_CHECKING:  # core/shapes.py imports this module's shapes
    from sanctum_proxy.core.shapes import JSONObject


class FunctionTool(TypedDict):

    type: Literal["function"]
    function: JSONObject


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class FunctionCallDelta(TypedDict, total=False):
    name: str
    arguments: str


class ToolCallDelta(TypedDict):
    """The first delta has index, id, type and name; the next ones the arguments."""

    index: int
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: FunctionCallDelta


class Delta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning_content: str
    reasoning: str
    refusal: str
    tool_calls: list[ToolCallDelta]
    function_call: FunctionCallDelta


class Usage(TypedDict, total=False):
    """The upstream's usage as it came."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: JSONObject
    completion_tokens_details: JSONObject


class Sanctum(TypedDict):
    """The mode that answered, the upstream requests made, every omen, the trace id."""

    mode: str
    rounds: int
    omens: list[JSONObject]
    trace_id: str


class Meta(TypedDict):
    """The fields every chunk of a stream repeats."""

    id: str
    created: int
    model: str
    system_fingerprint: NotRequired[str]


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
    finish_reason: str | None
    logprobs: NotRequired[JSONObject]  # written after the rest


class Chunk(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: NotRequired[str]
    choices: list[ChunkChoice]
    usage: NotRequired[Usage]
    sanctum: NotRequired[Sanctum]  # on the last chunk


class Message(TypedDict):
    """Role, content and refusal always present, then the upstream's other fields."""

    role: Literal["assistant"]
    content: str | None
    refusal: str | None
    tool_calls: NotRequired[list[ToolCall]]
    function_call: NotRequired[FunctionCall]
    reasoning_content: NotRequired[str]


class Choice(TypedDict):
    index: int
    message: Message
    logprobs: JSONObject | None  # null unless sent
    finish_reason: str | None


class Completion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: NotRequired[Usage]
    system_fingerprint: NotRequired[str]
    sanctum: Sanctum  # last


class Error(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: Error


def function_tool(function: JSONObject) -> FunctionTool:
    return {"type": "function", "function": function}


def tool_call(call_id: str, name: str, arguments: str) -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_call_deltas(index: int, call: ToolCall) -> list[Delta]:
    """One call as OpenAI deltas: index, id, type, name first; then the arguments."""
    function = call["function"]
    return [{"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                             "function": {"name": function["name"], "arguments": ""}}]},
            {"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]}]


def function_call_deltas(call: ToolCall) -> list[Delta]:
    """A call as the legacy API streams it."""
    function = call["function"]
    return [{"function_call": {"name": function["name"], "arguments": ""}},
            {"function_call": {"arguments": function["arguments"]}}]


def role_delta() -> Delta:
    return {"role": "assistant", "content": ""}


def text_delta(field: str, text: str) -> Delta:
    """A delta of content, a reasoning field or refusal."""
    return cast(Delta, {field: text})


def chunk(meta: Mapping[str, object], delta: Delta, finish_reason: str | None = None, index: int = 0) -> Chunk:
    out: JSONObject = {"id": meta["id"], "object": "chat.completion.chunk", "created": meta["created"],
                 "model": meta["model"]}
    if meta.get("system_fingerprint"):
        out["system_fingerprint"] = meta["system_fingerprint"]
    out["choices"] = [ChunkChoice(index=index, delta=delta, finish_reason=finish_reason)]
    return cast(Chunk, out)


def closing(finish: Chunk, meta: Mapping[str, object], usage: Usage | None, extra: Mapping[str, object],
            sanctum: Sanctum) -> list[Chunk]:
    """The finish chunk, then any usage chunk; `extra` and `sanctum` go on the last."""
    if usage is None:
        return [_ending(finish, extra, sanctum)]
    usage_chunk = chunk(meta, {})
    usage_chunk["choices"] = []
    usage_chunk["usage"] = usage
    return [finish, _ending(usage_chunk, extra, sanctum)]


def _ending(last: Chunk, extra: Mapping[str, object], sanctum: Sanctum) -> Chunk:
    out = cast(Chunk, {**last, **{k: v for k, v in extra.items() if k not in INTERNAL}})
    out["sanctum"] = sanctum
    return out


def message(upstream: Mapping[str, object]) -> Message:
    """The message with refusal present, null where missing (llama.cpp, Ollama and vLLM send none)."""
    if "content" in upstream and "refusal" in upstream:
        return cast(Message, upstream)
    return cast(Message, {"role": "assistant", "content": None, **upstream, "refusal": upstream.get("refusal")})


def choice(index: int, message: Message, finish_reason: str | None, extra: Mapping[str, object]) -> Choice:
    """The upstream's own choice fields go before finish_reason."""
    return cast(Choice, {"index": index, "message": message, "logprobs": None, **extra,
                         "finish_reason": finish_reason})


def completion(meta: Mapping[str, object], choices: list[Choice], usage: Usage | None, extra: Mapping[str, object],
               sanctum: Sanctum) -> Completion:
    """The round's own fields (`extra`) never override the proxy's; `sanctum` goes last."""
    body: JSONObject = {"id": meta["id"], "object": "chat.completion", "created": meta["created"],
                        "model": meta["model"], "choices": choices}
    if usage is not None:
        body["usage"] = usage
    if meta.get("system_fingerprint"):
        body["system_fingerprint"] = meta["system_fingerprint"]
    body.update((k, v) for k, v in extra.items() if k not in body and k != OLLAMA_FIELDS)
    body["sanctum"] = sanctum
    return cast(Completion, body)


def error_body(message: str, type_: str, param: str | None, code: str | None,
               extra: Mapping[str, object]) -> ErrorBody:
    """{"error": {message, type, param, code}}, then the error's own fields."""
    return {"error": cast(Error, {"message": message, "type": type_, "param": param, "code": code, **extra})}
