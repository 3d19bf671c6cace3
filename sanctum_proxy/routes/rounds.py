"""The round loop as a route runs it: traced, and its lessons about the upstream kept.

The loop writes nothing shared; this edge keeps its `Lesson`s and hands `RoundRecord`s to the trace.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import Request

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.offload import offloaded
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.repair import surrender
from sanctum_proxy.repair.loop import run
from sanctum_proxy.repair.loop_data import (
    ContentDelta,
    Event,
    FieldDelta,
    Final,
    Lesson,
    Plan,
    RoundRecord,
    Sender,
    note,
)
from sanctum_proxy.routes import context
from sanctum_proxy.services import Services, services
from sanctum_proxy.state import surrendered
from sanctum_proxy.state.traces import Trace
from sanctum_proxy.upstreams.pools import Destination
from sanctum_proxy.web.auth import ClientKey

Shown = ContentDelta | FieldDelta | om.Omen | Final
Recorded = Callable[[RoundRecord], None]


@dataclass(frozen=True)
class Rounds:
    """A request ready for the round loop: routed, planned and traced, its key read once."""

    chat: ChatRequest
    plan: Plan
    trace_id: str
    dest: Destination
    key: ClientKey  # as presented (the surrender memo tells clients apart by it), and for the upstream
    split_reasoning: bool = False  # reasoning_format = "split"
    started_ns: int = dataclasses.field(default_factory=time.perf_counter_ns)

    @property
    def auth(self) -> str | None:
        """The client's key for the upstream, under forward_client_key."""
        return self.key.upstream


def run_traced(request: Request, rounds: Rounds, send: Sender) -> AsyncIterator[Shown]:
    """The round loop with lessons kept, surrender handled, rounds and end traced."""
    state, plan = services(request), rounds.plan
    return _shown(state, rounds, plan, run(plan, context.first_round_checked(state, rounds.dest, plan, send,
                                                                             rounds.auth)),
                  lambda record: record_round(request, record), request)


def kept_run(request: Request, rounds: Rounds) -> Callable[[Plan, Sender, Recorded], AsyncIterator[Shown]]:
    """Like `run_traced` without recording the end: the n > 1 loops, recorded together by the caller."""
    state = services(request)
    return lambda plan, send, recorded: _shown(state, rounds, plan, run(plan, send), recorded)


def record_round(request: Request, record: RoundRecord, choice: int = 0) -> None:
    """A round's record, of choice `choice`, into the request's trace."""
    trace = getattr(request.state, "trace", None)
    if trace is not None:
        trace.record(record, choice)
        if trace.spans is not None:
            trace.spans.round(record, choice)


def recorder_of(request: Request) -> Callable[[RoundRecord, int], None]:
    """`record_round` for the n > 1 loops."""
    return lambda record, choice: record_round(request, record, choice)


async def _shown(state: Services, rounds: Rounds, plan: Plan, events: AsyncIterator[Event], recorded: Recorded,
                 traced: Request | None = None) -> AsyncIterator[Shown]:
    """The loop's events as the client sees them, in one generator layer since every chunk passes each layer.

    Keeps lessons, hands records on, and turns a parse error into the last call when `on_surrender` is "last_call".
    """
    trace: Trace | None = getattr(traced.state, "trace", None) if traced is not None else None
    omens: list[om.Omen] = []
    records: list[RoundRecord] = []
    shown = False
    first = trace is not None and trace.stream  # a stream's first-text time is still to be taken
    try:
        try:
            async for event in events:
                if isinstance(event, om.Omen):
                    omens.append(event)
                    if trace is not None:
                        trace.omens.append(event)
                    yield event
                elif isinstance(event, RoundRecord):
                    note(records, event)
                    recorded(event)
                elif isinstance(event, Lesson):
                    state.lessons.keep(rounds.dest.upstream, plan, event, rounds.auth)
                else:
                    if isinstance(event, Final):
                        succeeded(state, plan, event)
                    if trace is not None and isinstance(event, Final):
                        trace.final = event
                    elif first and trace is not None and not isinstance(event, Final) and event.text:
                        trace.first_chunk_ms, first = (time.perf_counter() - trace.started) * 1000, False
                    yield event
                    shown = True
        except ToolCallParseError as caught:
            exc = surrendered.told(caught, plan)
            # the last answer is read again for its calls: off the event loop, as the loop judges a long answer
            final = (await offloaded(surrender.last_call, plan, records, exc, omens)
                     if plan.on_surrender == surrender.LAST_CALL else None)
            if final is None:
                if traced is not None:  # a client that retries errors sends it again: one round then
                    surrendered.remember(plan, state.surrendered, rounds.key.presented)
                raise exc from None
            if trace is not None:
                trace.omens.append(final.omens[-1])
            yield final.omens[-1]
            if trace is not None:
                trace.final = final
            yield final
            shown = True
    except BaseException as exc:
        if traced is not None:
            state.recorder.ended(trace, exc, shown)
        raise
    if traced is not None:
        state.recorder.ended(trace, None, shown)


def succeeded(state: Services, plan: Plan, final: Final) -> None:
    """Native calls accepted clean revoke a flip."""
    calls = final.accepted.get("tool_calls") if final.accepted is not None else None
    if final.mode == "native" and plan.book is not None and calls and final.outcome is om.Outcome.CLEAN:
        state.modes.revoke(plan.upstream, plan.model)
