"""The round loop's state and verdicts, as plain frozen data (the table: loop.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import ToolCall
from sanctum_proxy.core.shapes import ChatMessage, ClientMessage, JSONObject
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.repair import constraint as ct
from sanctum_proxy.repair.events import Answer, Lesson, Mode


class Kind(Enum):
    """What the next round is."""

    ASK = "ask"
    TEXT = "text"  # without tools; the answer is taken as it is
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
    turns: tuple[ChatMessage, ...] = ()  # hidden correction turns; none: the round may be live
    closing: tuple[ChatMessage, ...] = ()  # TEXT: sent after the conversation
    phase: Phase = Phase.WAITING
    grammar_from: int = 0  # len(turns) at the first constrained round
    pin: str | None = None  # the known tool the last correction was about
    rejected: tuple[str, ...] = ()
    held: Accept | None = None  # MORE: the answer so far
    kept: tuple[ToolCall, ...] = ()  # valid calls of partly bad answers
    fresh: bool = False  # corrections go without transcript, since one overflowed

    @property
    def repair_rounds(self) -> int:
        return len(self.turns) // 2


@dataclass(frozen=True)
class Round:

    body: JSONObject
    constraint: ct.Constraint | None
    free_choice: bool  # offering text too, before any call attempt



# Verdicts: each carries the state after it.

@dataclass(frozen=True)
class Accept:
    """The answer for the client."""

    message: ClientMessage
    finish_reason: str
    answer: Answer
    omens: tuple[om.Omen, ...] = ()
    surrendered: bool = False  # on_surrender "content"
    outcome: om.Outcome = om.Outcome.ACCEPTED
    lesson: Lesson | None = None  # a quote's calls still count one failure


@dataclass(frozen=True)
class Correct:
    """Bounced with a correction."""

    state: State
    omens: tuple[om.Omen, ...]
    outcome: om.Outcome = om.Outcome.REJECTED


@dataclass(frozen=True)
class AskForText:
    """The call was not meant: ask for text."""

    state: State
    omens: tuple[om.Omen, ...]
    outcome: om.Outcome = om.Outcome.REJECTED


@dataclass(frozen=True)
class FallBack:
    """Auto mode: this request goes prompted."""

    state: State
    omens: tuple[om.Omen, ...]
    lesson: Lesson | None
    outcome: om.Outcome = om.Outcome.FALLBACK


@dataclass(frozen=True)
class Unconstrain:
    """The round again without the refused constraint."""

    state: State
    lesson: Lesson | None = Lesson("schema_refused")
    omens: tuple[om.Omen, ...] = ()
    outcome: om.Outcome = om.Outcome.FALLBACK


@dataclass(frozen=True)
class Surrender:
    """No valid call: ToolCallParseError (422)."""

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
    """follow_up_calls: hold the calls, ask for the next."""

    state: State
    omens: tuple[om.Omen, ...] = ()
    outcome: om.Outcome = om.Outcome.ACCEPTED


Verdict = Accept | Correct | AskForText | AskForMore | FallBack | Unconstrain | Surrender | Fail
