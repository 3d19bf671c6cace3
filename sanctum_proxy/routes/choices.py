"""`n` > 1 (docs/contract.md, "Several choices"): every choice judged and repaired on its own, over the round
loop's public API.

The first round goes upstream once, with the client's `n`. Its answer is split by choice `index`; each choice
runs through a round loop of its own (`run`), whose Sender answers its first round with that choice and sends
every later round (a correction, a fallback) upstream alone, with `n` = 1. So a choice that needs a correction
is re-asked alone and put back in its place; the others are untouched.

Choice 0's loop drives the first round, so a first round that fails (a fallback in auto mode) is retried the
way a single choice's is, still with `n`; the other loops start when the round that answers shows their
choices, in the mode that round was sent in. Streamed, the upstream's chunks are split by index as they arrive
and each choice's loop reads its own (live: every choice's text flows as it comes, under its own index).

An upstream that ignores `n` (Ollama) answers one choice: the client gets that one. One that refuses it
(llama.cpp's chat endpoint: `Only one completion choice is allowed`) answers an error: the client gets it.
The usage of the first round (all choices) is counted once, with choice 0; a re-asked choice adds its own.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.shapes import JSONObject, Usage
from sanctum_proxy.repair.events import Answer, ContentDelta, FieldDelta, Final, RoundRecord, Sender
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.usage import summed_usage
from sanctum_proxy.routes.rounds import Recorded, Shown


@dataclass(frozen=True)
class Ended:
    """Put on a queue after the last item: a choice's loop, or a choice's chunks, ended."""


def count(body: JSONObject) -> int:
    """How many choices the client asked for (1 unless `n` is an integer above 1)."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def alone(body: JSONObject) -> JSONObject:
    """A round of one choice: the body without `n`."""
    return {k: v for k, v in body.items() if k != "n"}


@dataclass
class Finals(Final):
    """The answer of every choice, in index order (`each`); its own fields are choice 0's, with the usage,
    rounds and omens of them all (omens of a choice other than 0 carry `choice`)."""

    each: list[Final] = field(default_factory=list)

    @classmethod
    def of(cls, finals: list[Final]) -> Finals:
        head = finals[0]
        usage: Usage | None = None
        for final in finals:
            if isinstance(final.usage, dict):
                usage = summed_usage(usage, final.usage) if usage is not None else copy.deepcopy(final.usage)
        rounds = sum(f.rounds for f in finals) - (len(finals) - 1)  # the first round was one request
        omens = [om.of_choice(o, i) for i, f in enumerate(finals) for o in f.omens]
        outcome = next((f.outcome for f in finals if f.outcome != "clean"), head.outcome)
        return cls(head.message, head.finish_reason, usage, head.mode, rounds, omens, head.meta, outcome,
                   head.extra, head.choice_extra, head.accepted, each=finals)




def split_chunk(piece: JSONObject) -> dict[int, JSONObject]:
    """A stream chunk by choice index, each part a chunk of its own whose one choice has index 0 (the usage
    and a chunk without choices go with choice 0)."""
    choices = piece.get("choices")
    if not isinstance(choices, list) or not choices:
        return {0: piece}
    by_index: dict[int, list[JSONObject]] = {}
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0)
        by_index.setdefault(index if isinstance(index, int) else 0, []).append({**choice, "index": 0})
    parts = {i: {**piece, "choices": cs} for i, cs in by_index.items()}
    for i, part in parts.items():
        if i != 0:
            part.pop("usage", None)
    return parts


class Choices:
    """The loops of one request's choices, and their events as (index, event) pairs; their round records go to
    `recorded` (routes/rounds.record_round: the trace) as (index, record)."""

    def __init__(self, plan: Plan, later: Sender, runner: Callable[[Plan, Sender, Recorded], AsyncIterator[Shown]],
                 recorded: Callable[[RoundRecord, int], None] = lambda record, index: None) -> None:
        self.plan = plan
        self.later = later  # a round of one choice, sent upstream (body without `n`)
        self.runner = runner  # the round loop (routes: with its lessons kept, routes/rounds.kept_run)
        self.recorded = recorded
        self.lead_omens: list[om.Omen] = []  # choice 0's omens so far: the others start with them
        self.lead_mode = plan.mode  # the mode of choice 0's latest round: the others start in it
        self._out: asyncio.Queue[tuple[int, Shown | BaseException | Ended]] = asyncio.Queue()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._first_done = False

    def spawn(self, index: int, first: Sender) -> None:
        """Start the loop of choice `index` (> 0), whose first round is answered by `first`."""
        if index in self._tasks:
            return
        plan = dataclasses.replace(self.plan, mode=self.lead_mode, opening_omens=tuple(self.lead_omens))
        self._tasks[index] = asyncio.create_task(self._drive(index, plan, self._sender(first)))

    def _sender(self, first: Sender) -> Sender:
        used = False

        def send(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
            nonlocal used
            if used:
                return self.later(alone(body), live)
            used = True
            return first(body, live)

        return send

    def lead_sender(self, first: Sender) -> Sender:
        """Choice 0's Sender: `first` (which sends `n` and spawns the other choices) until a round answers."""

        async def send(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
            if self._first_done:
                async for event in self.later(alone(body), live):
                    yield event
                return
            async for event in first(body, live):
                if isinstance(event, Answer):
                    self._first_done = True
                yield event

        return send

    def _recorded(self, index: int, record: RoundRecord) -> None:
        if index == 0:
            self.lead_mode = record.mode
        self.recorded(record, index)

    async def _drive(self, index: int, plan: Plan, send: Sender) -> None:
        try:
            async for event in self.runner(plan, send, lambda record: self._recorded(index, record)):
                if index == 0 and isinstance(event, om.Omen):
                    self.lead_omens.append(event)
                await self._out.put((index, event))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            await self._out.put((index, exc))
        await self._out.put((index, Ended()))

    async def events(self, lead: Sender) -> AsyncIterator[tuple[int, Shown] | Finals]:
        """Every choice's events as they come, as (index, event), then a Finals (bare: the recorder takes it
        for the trace's final); the first error of any choice ends them all (raised)."""
        self._tasks[0] = asyncio.create_task(self._drive(0, self.plan, lead))
        finals: dict[int, Final] = {}
        ended: set[int] = set()
        try:
            while len(ended) < len(self._tasks):
                index, event = await self._out.get()
                if isinstance(event, Ended):
                    ended.add(index)
                elif isinstance(event, BaseException):
                    raise event
                else:
                    if isinstance(event, Final):
                        finals[index] = event
                    yield index, event
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        yield Finals.of([finals[i] for i in sorted(finals)])


def one_answer(answer: Answer) -> Sender:
    """A first round answered by an Answer already in hand."""

    async def first(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        yield answer

    return first


ChunkQueue = asyncio.Queue[JSONObject | BaseException | Ended]  # one choice's chunks of a streamed first round


def queued_chunks(queue: ChunkQueue) -> AsyncIterator[JSONObject]:
    """The chunks put in `queue` until Ended; an exception put there is raised."""

    async def chunks() -> AsyncIterator[JSONObject]:
        while True:
            item = await queue.get()
            if isinstance(item, Ended):
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    return chunks()
