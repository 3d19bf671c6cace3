"""What the round loop (repair/loop.py) reads from its Sender (live deltas, then the round's Answer) and what it
yields. It writes nothing shared: whoever keeps round records (the trace, a surrender's last call) collects
them from its events (`note`).

    ContentDelta   text the client may see now (streaming: only the first round that shows any; the
                   accepted answer of a hidden round comes whole in the Final)
    FieldDelta     reasoning / refusal text of a live round
    om.Omen        an omen, when it happens (a writer sends it with its next event); every omen is in the
                   Final too, and the recorder keeps them when a surrender raises
    Lesson         what the caller should remember about the upstream (auto-mode fallback, refused schema)
    RoundRecord    a round as sent (outcome "pending"), then as judged (routes/rounds.py hands it to the trace)
    Final          the answer: the message for the client, usage summed over rounds, every omen
"""

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
    meta: AnswerMeta | None = None  # the live round's id, model, created, system_fingerprint, once known
    logprobs: JSONObject | None = None  # the upstream's logprobs of the tokens this text came from


@dataclass(frozen=True)
class FieldDelta:
    """Text of a message field other than content that the client may see now, in the field it came in
    (`reasoning_content`, `reasoning`, `refusal`): never read for calls, never held back; live like ContentDelta."""

    text: str
    field: str = "reasoning_content"


@dataclass(frozen=True)
class Answer:
    """One upstream round's answer, however it arrived."""

    message: ChatMessage
    finish_reason: str | None
    usage: Usage | None
    meta: AnswerMeta  # id, model, created, system_fingerprint of the upstream response, those it sent
    extra: JSONObject = field(default_factory=dict)  # the response's other top-level fields, as sent
    choice_extra: JSONObject = field(default_factory=dict)  # the choice's fields but index/message/finish


@dataclass(frozen=True)
class Lesson:
    """What a round taught about this (upstream, model), for the caller to keep (`plan.upstream`, `plan.model`):
    the loop keeps nothing between requests.

        tools_rejected          the upstream refused `tools`: the model goes prompted for good
        upstream_parse_failure  the upstream could not parse the model's own call: one failure counted
        schema_refused          the upstream refused the answer schema: stop constraining for this model
        tool_choice_refused     the upstream refused tool_choice "required": native corrections go without it
    """

    what: Literal["tools_rejected", "upstream_parse_failure", "schema_refused", "tool_choice_refused"]


class Sender(Protocol):
    def __call__(self, body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]: ...


@dataclass(frozen=True)
class RoundRecord:
    """One round as the loop yields it twice: when it is sent (outcome "pending") and when it is judged."""

    number: int
    mode: Mode
    sent: JSONObject
    latency_ms: float
    answer: ChatMessage | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    error: JSONObject | None = None  # the OpenAI error object (errors.ProxyError.body()["error"])
    outcome: str = "pending"  # accepted | rejected | fallback | error
    constrained: bool = False  # the round's decoding was constrained (answer schema, grammar or tool_choice)
    free_choice: bool = False  # ... offering text as well as calls, with no call attempt before it


@dataclass
class Final:
    """The answer as routes/ reads it."""

    message: ClientMessage
    finish_reason: str
    usage: Usage | None
    mode: Mode
    rounds: int
    omens: list[om.Omen]
    meta: AnswerMeta  # the answering round's Answer.meta
    outcome: str  # clean | repaired | rejected | fallback | surrendered (the most telling one)
    extra: JSONObject = field(default_factory=dict)  # the answering round's Answer.extra
    choice_extra: JSONObject = field(default_factory=dict)  # ... and Answer.choice_extra
    accepted: Mapping[str, object] | None = None  # the last round's answer as it came (None: it ended in an error):
    # reasoning the client's message may have dropped (protocols/reply.py)


def note(records: list[RoundRecord], record: RoundRecord) -> None:
    """Keep a round's record in `records`: the judged record replaces the one yielded when it was sent."""
    if records and records[-1].number == record.number:
        records[-1] = record
    else:
        records.append(record)


Event = ContentDelta | FieldDelta | om.Omen | Lesson | RoundRecord | Final
# What a stream writer renders (protocols/*_events.py): the loop's events but the lessons, which
# stay at the edge (routes/rounds.py), and the error that ends a stream.
StreamItem = ContentDelta | FieldDelta | om.Omen | Final | ProxyError
