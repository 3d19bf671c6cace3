"""The round loop as a route runs it: traced by the recorder, and what it learns about the upstream kept.

The loop (repair/loop.py) writes nothing shared: it yields a `Lesson` when a round taught something about this
(upstream, model), and this edge keeps it in the tables the next requests read (upstreams/auto_mode.py,
upstreams/capabilities.py); it yields each round's `RoundRecord`, and this edge hands it to the request's trace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from fastapi import Request

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.repair import surrender
from sanctum_proxy.repair.events import ContentDelta, Event, FieldDelta, Final, Lesson, RoundRecord, Sender, note
from sanctum_proxy.repair.loop import run
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.services import Services, services

Shown = ContentDelta | FieldDelta | om.Omen | Final  # the loop's events but its lessons and round records
Recorded = Callable[[RoundRecord], None]  # where a loop's round records go (the trace)


def run_traced(request: Request, plan: Plan, send: Sender) -> AsyncIterator[Shown]:
    """`run(plan, send)` with its lessons kept, a surrender answered as `on_surrender` says, its rounds in the
    trace and its end recorded (recorder.watch)."""
    events = kept_run(request)(plan, send, lambda record: record_round(request, record))
    return services(request).recorder.watch(request, events)


def kept_run(request: Request) -> Callable[[Plan, Sender, Recorded], AsyncIterator[Shown]]:
    """`run` with its lessons kept, a surrender answered and its round records handed to `recorded`, its end not
    recorded: the loops of n > 1 choices (routes/choices.py), whose events the caller records together."""
    return lambda plan, send, recorded: _keeping(services(request), plan, _surrendering(plan, run(plan, send)),
                                                 recorded)


def record_round(request: Request, record: RoundRecord, choice: int = 0) -> None:
    """A round's record (of choice `choice` of n > 1) into the request's trace."""
    trace = getattr(request.state, "trace", None)
    if trace is not None:
        trace.record(record, choice)


def recorder_of(request: Request) -> Callable[[RoundRecord, int], None]:
    """`record_round` for the loops of n > 1 choices (routes/choices.py)."""
    return lambda record, choice: record_round(request, record, choice)


async def _surrendering(plan: Plan, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """With `on_surrender = "last_call"`, the loop's SpellCallParseError becomes a Final holding the last call
    as the model made it, after its SpellCallSurrendered omen (repair/surrender.py); otherwise it stands."""
    omens: list[om.Omen] = []
    records: list[RoundRecord] = []
    try:
        async for event in events:
            if isinstance(event, om.Omen):
                omens.append(event)
            elif isinstance(event, RoundRecord):
                note(records, event)
            yield event
    except ToolCallParseError as exc:
        final = surrender.last_call(plan, records, exc, omens) if plan.on_surrender == surrender.LAST_CALL else None
        if final is None:
            raise
        yield final.omens[-1]
        yield final


async def _keeping(state: Services, plan: Plan, events: AsyncIterator[Event],
                   recorded: Recorded) -> AsyncIterator[Shown]:
    async for event in events:
        if isinstance(event, Lesson):
            keep(state, plan, event)
        elif isinstance(event, RoundRecord):
            recorded(event)
        else:
            yield event


def keep(state: Services, plan: Plan, lesson: Lesson) -> None:
    """Remember a lesson for (plan.upstream, plan.model): auto-mode decisions, a refused answer schema or
    tool_choice "required"."""
    if lesson.what == "tools_rejected":
        state.modes.settle(plan.upstream, plan.model, "prompted", "tools_rejected")
    elif lesson.what == "upstream_parse_failure":
        state.modes.parse_failure(plan.upstream, plan.model)
    elif lesson.what == "tool_choice_refused":
        state.capabilities.refuse_tool_choice(plan.upstream, plan.model)
    else:
        state.capabilities.refuse_schema(plan.upstream, plan.model)
