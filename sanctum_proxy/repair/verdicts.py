"""The round loop's state and verdicts: what the next round is (`State`, `Kind`, `Phase`), one round as
`loop.next_round` settles it (`Round`), and what a round's answer or error means (`Verdict`: `loop.judge`'s
result, applied by `loop.run`). Plain frozen data, no logic: the state table is in loop.py's docstring.
"""

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

    ASK = "ask"  # the request as its mode sends it (constrained or not), plus the hidden correction turns
    TEXT = "text"  # the conversation without tools (plus a closing turn): its answer is accepted as it is
    MORE = "more"  # follow_up_calls: the next call after those in `State.held` (constrained to one call)


class Phase(Enum):
    """Where constraining stands for this request."""

    WAITING = "waiting"  # no constrained round sent yet (or `constrain` is off: `_constraint` says None)
    CONSTRAINING = "constraining"  # constrained rounds since `State.grammar_from` hidden turns
    REFUSED = "refused"  # the upstream refused the answer schema: no more constrained rounds


@dataclass(frozen=True)
class State:
    """What the next round depends on: changed only by a verdict (`dataclasses.replace`)."""

    mode: Mode
    kind: Kind = Kind.ASK
    turns: tuple[ChatMessage, ...] = ()  # hidden correction turns so far (none: the round may be live)
    closing: tuple[ChatMessage, ...] = ()  # TEXT: the turns the text round is sent after the conversation
    phase: Phase = Phase.WAITING
    grammar_from: int = 0  # CONSTRAINING: len(turns) when the first constrained round was sent
    pin: str | None = None  # the one known tool the last correction was about
    rejected: tuple[str, ...] = ()  # every rejected answer's text, in order
    held: Accept | None = None  # MORE: the answer so far (its calls), accepted when no other call comes
    kept: tuple[ToolCall, ...] = ()  # the valid calls of partly bad answers so far (their bad ones corrected)
    fresh: bool = False  # a correction with its transcript did not fit the context: fresh corrections from here

    @property
    def repair_rounds(self) -> int:
        return len(self.turns) // 2


@dataclass(frozen=True)
class Round:
    """One round as `next_round` settles it."""

    body: JSONObject
    constraint: ct.Constraint | None
    free_choice: bool  # constrained, offering text as well as calls, with no call attempt before it



# Verdicts: what a round's answer (or error) means, and the state of the round after it.

@dataclass(frozen=True)
class Accept:
    """The answer: the message for the client."""

    message: ClientMessage
    finish_reason: str
    answer: Answer
    omens: tuple[om.Omen, ...] = ()
    surrendered: bool = False  # on_surrender "content": the last rejected answer as text
    outcome: str = "accepted"
    lesson: Lesson | None = None  # the calls were read from an upstream parse failure's quote (still one failure)


@dataclass(frozen=True)
class Correct:
    """Bounced with a correction; `state` carries the turns for the next round."""

    state: State
    omens: tuple[om.Omen, ...]
    outcome: str = "rejected"


@dataclass(frozen=True)
class AskForText:
    """The call was not meant (made up, broken under free choice, or already answered): ask for text."""

    state: State
    omens: tuple[om.Omen, ...]
    outcome: str = "rejected"


@dataclass(frozen=True)
class FallBack:
    """Auto mode: this request goes prompted."""

    state: State
    omens: tuple[om.Omen, ...]
    lesson: Lesson | None
    outcome: str = "fallback"


@dataclass(frozen=True)
class Unconstrain:
    """The upstream refused the answer schema: the round again without it."""

    state: State
    lesson: Lesson | None = Lesson("schema_refused")
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "fallback"


@dataclass(frozen=True)
class Surrender:
    """No valid call: SpellCallParseError (422)."""

    message: str
    rejected: tuple[str, ...]
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "rejected"


@dataclass(frozen=True)
class Fail:
    """An error no verdict turns into another round: raised as it is."""

    error: ProxyError
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "error"


@dataclass(frozen=True)
class AskForMore:
    """follow_up_calls: the calls so far are held in `state`; the next round asks for the next call."""

    state: State
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "accepted"


Verdict = Accept | Correct | AskForText | AskForMore | FallBack | Unconstrain | Surrender | Fail
