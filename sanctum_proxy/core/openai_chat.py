"""The OpenAI chat shapes the proxy writes (docs/contract.md sections 6 and 7), as TypedDicts with the builders
that make them: a `chat.completion` and its choice, a `chat.completion.chunk` and its choice and delta, a tool
call and its streamed deltas (and the legacy `function_call`), the usage, the `sanctum` block, the error body.

A builder fixes the bytes a client reads: a dict keeps the order its keys were written in and orjson writes that
order, so each builder writes its keys in the order of the wire (tests/protocols/test_chat_events.py pins
them). Fields the proxy passes on as the upstream sent them (a choice's logprobs, the usage, vendor fields such as
llama.cpp's `timings`) are `Json` or ride in `extra`; they are never rebuilt.

In core/ (not protocols/): the tool call is written by core/calls.py and the translators (protocols/) alike,
and the writers (routes/) use the rest; pure, no imports from the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypedDict, cast

Json = dict[str, object]  # a field passed on as the upstream sent it (read only after a check)


class FunctionTool(TypedDict):
    """A tool of a chat request (the translators and the legacy `functions` API write them)."""

    type: Literal["function"]
    function: Json  # name, description, parameters, strict


class FunctionCall(TypedDict):
    name: str
    arguments: str  # the JSON text of the arguments object


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class FunctionCallDelta(TypedDict, total=False):
    name: str
    arguments: str


class ToolCallDelta(TypedDict):
    """A streamed tool call: the first delta has index, id, type and name; the next ones the arguments."""

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
    function_call: FunctionCallDelta  # the legacy `functions` API


class Usage(TypedDict, total=False):
    """The upstream's usage, passed on as it came (summed over rounds by the loop)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: Json
    completion_tokens_details: Json


class Sanctum(TypedDict):
    """The `sanctum` block of an answer (docs/contract.md section 6): the mode that answered, the upstream requests
    made, every omen (core/omens.Omen.to_json), the trace id."""

    mode: str
    rounds: int
    omens: list[Json]
    trace_id: str


class Meta(TypedDict):
    """The fields every chunk of a stream repeats (the upstream's own, once the live round shows them)."""

    id: str
    created: int
    model: str
    system_fingerprint: NotRequired[str]


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
    finish_reason: str | None
    logprobs: NotRequired[Json]  # the upstream's, on a content chunk that carries them (written after the rest)


class Chunk(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: NotRequired[str]
    choices: list[ChunkChoice]
    usage: NotRequired[Usage]
    sanctum: NotRequired[Sanctum]  # on the last chunk, after the answering round's own fields


class Message(TypedDict):
    """ChatCompletionResponseMessage: role, content and refusal always present (null where the upstream left one
    out); the upstream's other fields (tool_calls, reasoning_content, ...) as it sent them, in its order."""

    role: Literal["assistant"]
    content: str | None
    refusal: str | None
    tool_calls: NotRequired[list[ToolCall]]
    function_call: NotRequired[FunctionCall]
    reasoning_content: NotRequired[str]


class Choice(TypedDict):
    index: int
    message: Message
    logprobs: Json | None  # null unless the upstream sent it (with the choice's other own fields)
    finish_reason: str | None


class Completion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: NotRequired[Usage]
    system_fingerprint: NotRequired[str]
    sanctum: Sanctum  # last, after the answering round's own fields


class Error(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: Error


def function_tool(function: Json) -> FunctionTool:
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
    """A call as the legacy API streams it: the name, then the arguments."""
    function = call["function"]
    return [{"function_call": {"name": function["name"], "arguments": ""}},
            {"function_call": {"arguments": function["arguments"]}}]


def role_delta() -> Delta:
    """The first delta of a choice."""
    return {"role": "assistant", "content": ""}


def text_delta(field: str, text: str) -> Delta:
    """A delta of one text field: content, a reasoning field or refusal."""
    return cast(Delta, {field: text})


def chunk(meta: Mapping[str, object], delta: Delta, finish_reason: str | None = None, index: int = 0) -> Chunk:
    out: Json = {"id": meta["id"], "object": "chat.completion.chunk", "created": meta["created"],
                 "model": meta["model"]}
    if meta.get("system_fingerprint"):
        out["system_fingerprint"] = meta["system_fingerprint"]
    out["choices"] = [ChunkChoice(index=index, delta=delta, finish_reason=finish_reason)]
    return cast(Chunk, out)


def closing(finish: Chunk, meta: Mapping[str, object], usage: Usage | None, extra: Mapping[str, object],
            sanctum: Sanctum) -> list[Chunk]:
    """The last chunks of a stream: the finish chunk, then, when there is a usage to send, the usage chunk
    (`choices: []`); the answering round's own fields (`extra`) and the `sanctum` block go on the last of them."""
    if usage is None:
        return [_ending(finish, extra, sanctum)]
    usage_chunk = chunk(meta, {})
    usage_chunk["choices"] = []
    usage_chunk["usage"] = usage  # the upstream's, as it came
    return [finish, _ending(usage_chunk, extra, sanctum)]


def _ending(last: Chunk, extra: Mapping[str, object], sanctum: Sanctum) -> Chunk:
    out = cast(Chunk, {**last, **{k: v for k, v in extra.items() if k != "sanctum"}})
    out["sanctum"] = sanctum
    return out


def message(upstream: Mapping[str, object]) -> Message:
    """The message with the keys the OpenAPI spec requires of it (ChatCompletionResponseMessage: role, content,
    refusal) present: null where the upstream left one out (llama.cpp, Ollama and vLLM send no `refusal`)."""
    if "content" in upstream and "refusal" in upstream:
        return cast(Message, upstream)
    return cast(Message, {"role": "assistant", "content": None, **upstream, "refusal": upstream.get("refusal")})


def choice(index: int, message: Message, finish_reason: str | None, extra: Mapping[str, object]) -> Choice:
    """A choice of a chat.completion: the choice's own fields the upstream sent (`extra`: logprobs, vendor
    fields) before the finish_reason, logprobs null where it sent none."""
    return cast(Choice, {"index": index, "message": message, "logprobs": None, **extra,
                         "finish_reason": finish_reason})


def completion(meta: Mapping[str, object], choices: list[Choice], usage: Usage | None, extra: Mapping[str, object],
               sanctum: Sanctum) -> Completion:
    """The chat.completion: `meta` (id, created, model, system_fingerprint), the choices, the usage when the
    upstream sent one, the answering round's own fields (`extra`, never over the proxy's), `sanctum` last."""
    body: Json = {"id": meta["id"], "object": "chat.completion", "created": meta["created"], "model": meta["model"],
                  "choices": choices}
    if usage is not None:
        body["usage"] = usage
    if meta.get("system_fingerprint"):
        body["system_fingerprint"] = meta["system_fingerprint"]
    body.update((k, v) for k, v in extra.items() if k not in body)
    body["sanctum"] = sanctum
    return cast(Completion, body)


def error_body(message: str, type_: str, param: str | None, code: str | None,
               extra: Mapping[str, object]) -> ErrorBody:
    """The OpenAI-shaped error body: {"error": {message, type, param, code}}, then the error's own fields."""
    return {"error": cast(Error, {"message": message, "type": type_, "param": param, "code": code, **extra})}
