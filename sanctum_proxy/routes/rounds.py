"""The round loop as a route runs it: traced by the recorder, and what it learns about the upstream kept.

The loop (repair/loop.py) writes nothing shared: it yields a `Lesson` when a round taught something about this
(upstream, model), and this edge keeps it in the tables the next requests read (upstreams/auto_mode.py,
upstreams/capabilities.py); it yields each round's `RoundRecord`, and this edge hands it to the request's trace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from fastapi import Request

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.offload import offloaded
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.repair import surrender
from sanctum_proxy.repair.events import ContentDelta, Event, FieldDelta, Final, Lesson, RoundRecord, Sender, note
from sanctum_proxy.repair.loop import run
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.services import Services, destination, services
from sanctum_proxy.state.traces import Trace
from sanctum_proxy.upstreams import context

Shown = ContentDelta | FieldDelta | om.Omen | Final  # the loop's events but its lessons and round records
Recorded = Callable[[RoundRecord], None]  # where a loop's round records go (the trace)


def run_traced(request: Request, plan: Plan, send: Sender) -> AsyncIterator[Shown]:
    """`run(plan, send)` with its lessons kept, a surrender answered as `on_surrender` says, its rounds in the
    trace and its end recorded (what recorder.watch does, in the same layer)."""
    return _shown(services(request), plan, run(plan, fitted(request, plan, send)),
                  lambda record: record_round(request, record), request)


def fitted(request: Request, plan: Plan, send: Sender) -> Sender:
    """`send` with its first round checked against the model's context where the probe learnt it
    (upstreams/context.py)."""
    state, dest = services(request), destination(request)
    caps = state.capabilities.cached(plan.upstream, str(plan.body.get("model", "")))
    return context.fitted(send, dest.upstream, dest.upstream.root_url, caps.context if caps is not None else None,
                          state.settings.probe_timeout)


def kept_run(request: Request) -> Callable[[Plan, Sender, Recorded], AsyncIterator[Shown]]:
    """`run` with its lessons kept, a surrender answered and its round records handed to `recorded`, its end not
    recorded: the loops of n > 1 choices (routes/choices.py), whose events the caller records together."""
    return lambda plan, send, recorded: _shown(services(request), plan, run(plan, send), recorded)


def record_round(request: Request, record: RoundRecord, choice: int = 0) -> None:
    """A round's record (of choice `choice` of n > 1) into the request's trace."""
    trace = getattr(request.state, "trace", None)
    if trace is not None:
        trace.record(record, choice)


def recorder_of(request: Request) -> Callable[[RoundRecord, int], None]:
    """`record_round` for the loops of n > 1 choices (routes/choices.py)."""
    return lambda record, choice: record_round(request, record, choice)


async def _shown(state: Services, plan: Plan, events: AsyncIterator[Event], recorded: Recorded,
                 traced: Request | None = None) -> AsyncIterator[Shown]:
    """The loop's events as the client sees them, in one generator layer over the loop's (every streamed chunk
    passes each layer): lessons kept (`keep`), round records handed to `recorded`, and with `on_surrender =
    "last_call"` the loop's SpellCallParseError turned into a Final holding the last call as the model made it,
    after its SpellCallSurrendered omen (repair/surrender.py; otherwise it stands). With `traced` (the request),
    what Recorder.watch does too: the Final and the omens into the request's trace, which ends however the
    loop ends (Recorder.ended)."""
    trace: Trace | None = getattr(traced.state, "trace", None) if traced is not None else None
    omens: list[om.Omen] = []
    records: list[RoundRecord] = []
    shown = False
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
                    keep(state, plan, event)
                else:
                    if trace is not None and isinstance(event, Final):
                        trace.final = event
                    yield event
                    shown = True
        except ToolCallParseError as exc:
            # the last answer is read again for its calls: off the event loop, as the loop judges a long answer
            final = (await offloaded(surrender.last_call, plan, records, exc, omens)
                     if plan.on_surrender == surrender.LAST_CALL else None)
            if final is None:
                raise
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
