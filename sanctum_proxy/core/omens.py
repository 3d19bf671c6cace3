"""Omens, the observable events of one request, and how they are rendered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import orjson

from sanctum_proxy.core.calls import Problem, Repair
from sanctum_proxy.core.openai_chat import Sanctum
from sanctum_proxy.core.shapes import JSONObject


class OmenType(StrEnum):
    REPAIRED = "SpellCallRepaired"
    REJECTED = "SpellCallRejected"
    FALLBACK = "SpellCallingFallback"
    DROPPED = "SpellCallsDropped"
    SURRENDERED = "SpellCallSurrendered"
    WITHHELD = "SpellsWithheld"
    WIDENED = "SpellContextWidened"
    HISTORY = "SpellHistoryMended"


class Outcome(StrEnum):
    """A request's outcome (clean to error: its most telling round's) or a round's (rejected to too_long)."""

    CLEAN = "clean"
    REPAIRED = "repaired"
    REJECTED = "rejected"
    FALLBACK = "fallback"
    SURRENDERED = "surrendered"
    ERROR = "error"
    PENDING = "pending"
    ACCEPTED = "accepted"
    TOO_LONG = "too_long"  # a correction over the upstream's context, asked again without the transcript


REQUEST_OUTCOMES = (Outcome.CLEAN, Outcome.REPAIRED, Outcome.REJECTED, Outcome.FALLBACK, Outcome.SURRENDERED,
                    Outcome.ERROR)


@dataclass(frozen=True)
class Omen:
    type: OmenType
    round: int
    fields: JSONObject = field(default_factory=dict)

    def to_json(self) -> JSONObject:
        return {"type": str(self.type), "round": self.round, **self.fields}


def of_choice(omen: Omen, index: int) -> Omen:
    """An omen of choice `index` of n > 1: choice 0's unchanged, another's with its `choice`."""
    return omen if index == 0 else Omen(omen.type, omen.round, {**omen.fields, "choice": index})


def repaired(round_no: int, repair: Repair) -> Omen:
    return Omen(OmenType.REPAIRED, round_no, {
        "spell": repair.tool, "call_id": repair.call_id, "repairs": list(repair.repairs), "raw": repair.raw})


def rejected(round_no: int, problem: Problem, correction: str) -> Omen:
    return Omen(OmenType.REJECTED, round_no, {
        "spell": problem.tool, "reason": problem.reason, "details": list(problem.details),
        "correction": correction, "raw": problem.raw})


def fallback(round_no: int, reason: str, upstream_status: int | None, message: str) -> Omen:
    return Omen(OmenType.FALLBACK, round_no, {
        "from": "native", "to": "prompted", "reason": reason, "upstream_status": upstream_status,
        "message": message})


def dropped(round_no: int, tool: str | None, call_id: str, raw: str,
            reason: str = "parallel_tool_calls_false") -> Omen:
    """A call left out: cut by parallel_tool_calls=false, a `duplicate_call` of `call_id`, or `unrepaired`."""
    return Omen(OmenType.DROPPED, round_no, {"spell": tool, "call_id": call_id, "reason": reason, "raw": raw})


def surrendered(round_no: int, message: str, rejected_raw: Sequence[str]) -> Omen:
    return Omen(OmenType.SURRENDERED, round_no, {"message": message, "rejected": list(rejected_raw)})


def withheld(round_no: int, tools: list[JSONObject], reason: str) -> Omen:
    return Omen(OmenType.WITHHELD, round_no, {"tools": tools, "reason": reason})


def widened(num_ctx: int, runs_with: int, prompt_tokens: int, room: int) -> Omen:
    """The request would have run with `runs_with` tokens of context: it is sent with `num_ctx`."""
    return Omen(OmenType.WIDENED, 0, {"num_ctx": num_ctx, "from": runs_with, "estimated_prompt_tokens": prompt_tokens,
                                      "answer_room": room})


def history_mended(message: int, tool: str, call_id: str, repairs: list[str], raw: str, *, as_text: bool) -> Omen:
    """A call the client replayed (`messages[message]`) whose arguments no upstream reads: mended, or sent as
    text."""
    return Omen(OmenType.HISTORY, 0, {"message": message, "spell": tool, "call_id": call_id, "repairs": repairs,
                                      "as_text": as_text, "raw": raw})


def header_summary(omens: Sequence[Omen]) -> str:
    """`SpellCallRepaired=2, SpellCallRejected=1` in first-seen order; "" when there are none."""
    counts = Counter(str(o.type) for o in omens)
    return ", ".join(f"{name}={n}" for name, n in counts.items())


def sse_comment(omen: Omen) -> bytes:
    return b": omen " + orjson.dumps(omen.to_json()) + b"\n\n"


def sse_event(omen: Omen) -> bytes:
    envelope = {"object": "sanctum.omen", "choices": [], **omen.to_json()}
    return b"event: omen\ndata: " + orjson.dumps(envelope) + b"\n\n"


class Held:
    """A stream's omens, each rendered once before the next event goes out."""

    def __init__(self, render: Callable[[Omen], bytes] = sse_comment) -> None:
        self.render = render
        self.omens: list[Omen] = []
        self.sent = 0

    def hold(self, omen: Omen) -> None:
        self.omens.append(omen)

    def due(self, omens: Sequence[Omen] | None = None) -> list[bytes]:
        """The omens not sent yet, rendered; `omens` is the whole list, where the answer brings it."""
        omens = self.omens if omens is None else omens
        out = [self.render(o) for o in omens[self.sent:]]
        self.sent = max(self.sent, len(omens))
        return out


def sanctum_object(mode: str, rounds: int, omens: Sequence[Omen], trace_id: str) -> Sanctum:
    return {"mode": mode, "rounds": rounds, "omens": [o.to_json() for o in omens], "trace_id": trace_id}
