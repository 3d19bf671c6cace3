"""The wire shapes that cross the seams between layers: a chat message, a tool call as the wire holds it, the
usage, an upstream answer's meta, and the names for JSON that is genuinely arbitrary.

TypedDicts on purpose: they cost nothing at run time (the dicts parsed from the upstream's bytes are the
values, orjson writes them back as they are; no conversion, no validation on the hot path), and mypy checks
every key the proxy reads or writes. A dataclass or a msgspec Struct would need a conversion at each edge and a
way to carry the vendor fields the proxy passes on untouched. A TypedDict names only the keys the proxy reads:
an upstream's other fields still ride in the same dict (total=False; `**message` keeps them).

Reused, not duplicated: the tool call, its function, the usage come from core/openai_chat.py (the shapes the
proxy writes); the chat message and the answer's meta are new here because the written ones (openai_chat.Message,
openai_chat.Meta) require keys an upstream may leave out. The translated protocols' own answer shapes live with
their builders (protocols/messages_api.py, protocols/responses_api.py).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict, cast

from sanctum_proxy.core.openai_chat import FunctionCall, ToolCall, Usage

__all__ = ["META", "AnswerMeta", "ChatMessage", "ClientMessage", "ContentPart", "FunctionCall", "JSONObject",
           "JSONValue", "Role", "ToolCallWire", "Usage", "answer_meta"]

# A value that really is arbitrary JSON (a content part, an upstream's tool call before tier 1 reads it, a vendor
# field passed on): the proxy reads it only after an isinstance check, so `object` is what it is.
JSONValue = object
JSONObject = dict[str, JSONValue]  # a JSON object whose values the reader checks (a body, a vendor's fields)

# A tool call on the chat wire: {"id", "type": "function", "function": {"name", "arguments": JSON text}}. Inside
# the proxy a call is core/calls.ToolCall (id, name, arguments); ToolCall.to_openai and ToolCall.from_wire convert.
ToolCallWire = ToolCall

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ChatMessage(TypedDict, total=False):
    """A chat message as the upstream sends it or the proxy writes it into a transcript: only the keys the proxy
    reads are named; an upstream's own fields ride along in the same dict."""

    role: Role
    content: str | Sequence[JSONValue] | None  # text, or a client's content parts (a list)
    tool_calls: Sequence[JSONValue]  # ToolCallWire as the proxy writes them; an upstream's as sent (checked on read)
    tool_call_id: str
    name: str
    function_call: JSONValue  # the legacy API's call (FunctionCall as written)
    refusal: str | None
    reasoning_content: str
    reasoning: str


class ContentPart(TypedDict, total=False):
    """A chat content part the translators write (protocols/): text, or an image by URL or data URL."""

    type: Literal["text", "image_url"]
    text: str
    image_url: JSONObject  # {"url": ..., "detail"?: ...}


class ClientMessage(TypedDict, total=False):
    """The message the proxy answers with (repair/events.Final.message): the loop's accepted message, whose calls
    tier 1 wrote as ToolCallWire (repair/answer.client_message); a round without tools offered passes the
    upstream's as it came."""

    role: Role
    content: str | None
    tool_calls: list[ToolCallWire]
    function_call: FunctionCall  # the legacy API's (core/legacy.to_function_call)
    refusal: str | None
    reasoning_content: str
    reasoning: str


class AnswerMeta(TypedDict, total=False):
    """The fields of an upstream answer every chunk of the client's stream repeats: whichever it sent."""

    id: str
    model: str
    created: int
    system_fingerprint: str


META = ("id", "created", "model", "system_fingerprint")  # AnswerMeta's keys, in the order a chat answer has them
# A chat body's key for the fields of a native Ollama request with no chat equivalent (options, keep_alive, format,
# think, ...), as the client sent them: sent to Ollama's /api/chat on every round, never to a /v1 upstream.
OLLAMA_FIELDS = "sanctum_ollama"


def answer_meta(source: Mapping[str, object]) -> AnswerMeta:
    """The AnswerMeta fields of an upstream answer or chunk, those it sent, as it sent them (a cast: they are
    passed on to the client untouched, whatever their type)."""
    return cast("AnswerMeta", {k: source[k] for k in META if k in source})
