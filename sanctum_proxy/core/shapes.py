"""The wire shapes crossing the layers, as TypedDicts naming only the keys the proxy reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict, cast

from sanctum_proxy.core.openai_chat import OLLAMA_FIELDS, FunctionCall, ToolCall, Usage

__all__ = ["META", "AnswerMeta", "ChatMessage", "ClientMessage", "ContentPart", "FunctionCall", "JSONObject",
           "JSONValue", "OLLAMA_FIELDS", "Role", "ToolCallWire", "Usage", "answer_meta"]

# Arbitrary JSON, read only after an isinstance check.
JSONValue = object
JSONObject = dict[str, JSONValue]

# Inside the proxy a call is core/calls.ToolCall.
ToolCallWire = ToolCall

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ChatMessage(TypedDict, total=False):
    """A chat message from the upstream or in a transcript."""

    role: Role
    content: str | Sequence[JSONValue] | None
    tool_calls: Sequence[JSONValue]  # an upstream's are checked on read
    tool_call_id: str
    name: str
    function_call: JSONValue
    refusal: str | None
    reasoning_content: str
    reasoning: str


class ContentPart(TypedDict, total=False):

    type: Literal["text", "image_url"]
    text: str
    image_url: JSONObject  # {"url": ..., "detail"?: ...}


class ClientMessage(TypedDict, total=False):
    """The message the proxy answers with."""

    role: Role
    content: str | None
    tool_calls: list[ToolCallWire]
    function_call: FunctionCall
    refusal: str | None
    reasoning_content: str
    reasoning: str


class AnswerMeta(TypedDict, total=False):
    """The upstream answer fields every chunk of the client's stream repeats."""

    id: str
    model: str
    created: int
    system_fingerprint: str


META = ("id", "created", "model", "system_fingerprint")


def answer_meta(source: Mapping[str, object]) -> AnswerMeta:
    return cast("AnswerMeta", {k: source[k] for k in META if k in source})
