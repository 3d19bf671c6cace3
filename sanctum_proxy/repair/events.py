"""What the round loop reads from its Sender and what it yields."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.shapes import AnswerMeta, ChatMessage, ClientMessage, JSONObject, Usage
from sanctum_proxy.errors import ProxyError

Mode = Literal["native", "prompted"]


@dataclass(frozen=True)
class ContentDelta:
    text: str
    meta: AnswerMeta | None = None  # the live round's ids, once known
    logprobs: JSONObject | None = None


@dataclass(frozen=True)
class FieldDelta:
    """Live text of a field other than content (reasoning, refusal), never read for calls."""

    text: str
    field: str = "reasoning_content"


@dataclass(frozen=True)
class Answer:

    message: ChatMessage
    finish_reason: str | None
    usage: Usage | None
    meta: AnswerMeta
    extra: JSONObject = field(default_factory=dict)  # the response's other top-level fields
    choice_extra: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Lesson:
    """What a round taught about this (upstream, model), for the caller to keep."""

    what: Literal["tools_rejected", "upstream_parse_failure", "schema_refused", "tool_choice_refused"]


class Sender(Protocol):
    def __call__(self, body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]: ...


@dataclass(frozen=True)
class RoundRecord:
    """One round, yielded when sent (outcome "pending") and again when judged."""

    number: int
    mode: Mode
    sent: JSONObject
    latency_ms: float
    answer: ChatMessage | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    meta: AnswerMeta | None = None  # the answer's id and model, as the upstream wrote them
    error: JSONObject | None = None  # the OpenAI error object
    outcome: om.Outcome = om.Outcome.PENDING  # then accepted, rejected, fallback, error or too_long
    constrained: bool = False
    free_choice: bool = False


@dataclass
class Final:

    message: ClientMessage
    finish_reason: str
    usage: Usage | None
    mode: Mode
    rounds: int
    omens: list[om.Omen]
    meta: AnswerMeta
    outcome: om.Outcome  # clean, repaired, rejected, fallback or surrendered
    extra: JSONObject = field(default_factory=dict)
    choice_extra: JSONObject = field(default_factory=dict)
    accepted: Mapping[str, object] | None = None  # the last answer as it came; None after an error


def note(records: list[RoundRecord], record: RoundRecord) -> None:
    """Keep a round's record, the judged one replacing the one sent."""
    if records and records[-1].number == record.number:
        records[-1] = record
    else:
        records.append(record)


Event = ContentDelta | FieldDelta | om.Omen | Lesson | RoundRecord | Final
# What a stream writer renders: no lessons, and maybe the error that ends it.
StreamItem = ContentDelta | FieldDelta | om.Omen | Final | ProxyError
