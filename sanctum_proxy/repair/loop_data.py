"""The round loop's data: its plan, what its Sender yields, its state and verdicts, usage summed."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard, cast

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import ToolCall
from sanctum_proxy.core.shapes import AnswerMeta, ChatMessage, ClientMessage, JSONObject, Usage
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.repair.toolbox import Toolbox

if TYPE_CHECKING:  # constrain.py imports Plan
    from sanctum_proxy.repair import constrain as cn
    from sanctum_proxy.repair.constrain import Constraint

Mode = Literal["native", "prompted"]


@dataclass(frozen=True)
class ContentDelta:
    text: str
    meta: AnswerMeta | None = None  # the live round's ids
    logprobs: JSONObject | None = None


@dataclass(frozen=True)
class FieldDelta:
    """Live reasoning or refusal text, never read for calls."""

    text: str
    field: str = "reasoning_content"


@dataclass(frozen=True)
class Answer:

    message: ChatMessage
    finish_reason: str | None
    usage: Usage | None
    meta: AnswerMeta
    extra: JSONObject = field(default_factory=dict)  # the response's other fields
    choice_extra: JSONObject = field(default_factory=dict)


How = Literal["schema", "grammar", "tool_choice"]


@dataclass(frozen=True)
class Lesson:
    """What a round taught about this upstream and model."""

    what: Literal["tools_rejected", "upstream_parse_failure", "schema_refused", "tool_choice_refused"]
    how: How | None = None  # the refused constraint


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
    meta: AnswerMeta | None = None
    error: JSONObject | None = None  # the OpenAI error object
    outcome: om.Outcome = om.Outcome.PENDING
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
    outcome: om.Outcome
    extra: JSONObject = field(default_factory=dict)
    choice_extra: JSONObject = field(default_factory=dict)
    accepted: Mapping[str, object] | None = None  # the last answer as it came


def note(records: list[RoundRecord], record: RoundRecord) -> None:
    """Keep a round's record, the judged one replacing the one sent."""
    if records and records[-1].number == record.number:
        records[-1] = record
    else:
        records.append(record)


Event = ContentDelta | FieldDelta | om.Omen | Lesson | RoundRecord | Final
# A stream writer's items: no lessons, perhaps an ending error.
StreamItem = ContentDelta | FieldDelta | om.Omen | Final | ProxyError


@dataclass(frozen=True)
class Plan:

    body: JSONObject
    book: Toolbox | None  # None: no tools offered
    mode: Mode
    auto: bool
    max_rounds: int
    on_surrender: str = "error"
    prompt_format: str = "hermes"
    upstream: str = ""
    new_id: Callable[[], str] | None = None
    opening_omens: tuple[om.Omen, ...] = ()  # from a probe
    constrain: cn.Constrain = "off"
    correction_context: Literal["transcript", "fresh"] = "transcript"
    grammar: bool = False  # the upstream takes GBNF (llama.cpp)
    tool_choice: bool = True  # False: the upstream refused tool_choice "required"
    native_calls: bool | None = None  # False: the template drops tools (llama.cpp --jinja)
    max_repair_bytes: int = 64 * 1024
    max_grammar_bytes: int = 1024 * 1024
    follow_up_calls: bool = False
    forbidden: Toolbox | None = None  # tools offered with tool_choice "none"
    surrendered_ago: float | None = None  # since this request last surrendered
    memo_key: bytes | None = None  # its digest in state/surrendered.py

    @property
    def read_names(self) -> frozenset[str]:
        """The tool names whose calls a stream holds back."""
        book = self.book or self.forbidden
        return book.name_set if book is not None else frozenset()

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def parallel(self) -> bool:
        return self.body.get("parallel_tool_calls") is not False

    @property
    def required(self) -> str | None:
        """"any" for tool_choice required, a name for a named choice, else None."""
        choice = self.body.get("tool_choice")
        if choice == "required":
            return "any"
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None

    @property
    def new_ids(self) -> dict[str, Callable[[], str]]:
        """mend.assess's `new_id` keyword."""
        return {"new_id": self.new_id} if self.new_id else {}


def added(total: Usage | None, usage: Usage | None) -> Usage | None:
    """`usage` added to `total`; the first one copied."""
    if not isinstance(usage, dict):
        return total
    return summed_usage(total, usage) if total is not None else cast(Usage, _copied(usage))


def summed_usage(total: Usage, usage: Usage) -> Usage:
    return cast(Usage, _summed(total, usage))


def _summed(total: Mapping[str, object], usage: Mapping[str, object]) -> JSONObject:
    out: JSONObject = dict(total)
    for key, value in usage.items():
        before = out.get(key, None)
        if key not in out:
            out[key] = _copied(value)
        elif _count(value) and _count(before):
            out[key] = before + value
        elif isinstance(value, dict) and isinstance(before, dict):
            out[key] = _summed(before, value)
    return out


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _copied(value: object) -> object:
    """A copy faster than copy.deepcopy."""
    if not isinstance(value, dict | list):
        return value
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:  # an integer past 64 bits
        return copy.deepcopy(value)


class Kind(Enum):
    """What the next round is."""

    ASK = "ask"
    TEXT = "text"  # no tools; the answer as it is
    MORE = "more"  # one more call after `State.held`


class Phase(Enum):
    """Where constraining stands for this request."""

    WAITING = "waiting"
    CONSTRAINING = "constraining"
    REFUSED = "refused"  # no more constrained rounds


@dataclass(frozen=True)
class State:
    """What the next round depends on; only a verdict changes it."""

    mode: Mode
    kind: Kind = Kind.ASK
    turns: tuple[ChatMessage, ...] = ()  # hidden turns
    closing: tuple[ChatMessage, ...] = ()  # TEXT: sent after the conversation
    phase: Phase = Phase.WAITING
    grammar_from: int = 0  # len(turns) at the first constrained round
    pin: str | None = None  # the tool the last correction named
    rejected: tuple[str, ...] = ()
    held: Accept | None = None  # MORE: the answer so far
    kept: tuple[ToolCall, ...] = ()  # valid calls of partly bad answers
    fresh: bool = False  # corrections without transcript

    @property
    def repair_rounds(self) -> int:
        return len(self.turns) // 2


@dataclass(frozen=True)
class Round:

    body: JSONObject
    constraint: Constraint | None
    free_choice: bool  # text offered too, before any call


# Verdicts (drawn in repair/loop.py); each carries the state after it.

@dataclass(frozen=True)
class Accept:
    message: ClientMessage
    finish_reason: str
    answer: Answer
    omens: tuple[om.Omen, ...] = ()
    surrendered: bool = False  # on_surrender "content"
    outcome: om.Outcome = om.Outcome.ACCEPTED
    lesson: Lesson | None = None  # a quote's calls still count as a failure


@dataclass(frozen=True)
class Correct:
    state: State
    omens: tuple[om.Omen, ...]
    outcome: om.Outcome = om.Outcome.REJECTED


@dataclass(frozen=True)
class AskForText:
    state: State
    omens: tuple[om.Omen, ...]
    outcome: om.Outcome = om.Outcome.REJECTED


@dataclass(frozen=True)
class FallBack:
    state: State
    omens: tuple[om.Omen, ...]
    lesson: Lesson | None
    outcome: om.Outcome = om.Outcome.FALLBACK


@dataclass(frozen=True)
class Unconstrain:
    state: State
    lesson: Lesson
    omens: tuple[om.Omen, ...] = ()
    outcome: om.Outcome = om.Outcome.FALLBACK


@dataclass(frozen=True)
class Surrender:
    message: str
    rejected: tuple[str, ...]
    omens: tuple[om.Omen, ...] = ()
    outcome: om.Outcome = om.Outcome.REJECTED


@dataclass(frozen=True)
class Fail:

    error: ProxyError
    omens: tuple[om.Omen, ...] = ()
    outcome: om.Outcome = om.Outcome.ERROR


@dataclass(frozen=True)
class AskForMore:
    state: State
    omens: tuple[om.Omen, ...] = ()
    outcome: om.Outcome = om.Outcome.ACCEPTED


Verdict = Accept | Correct | AskForText | AskForMore | FallBack | Unconstrain | Surrender | Fail
