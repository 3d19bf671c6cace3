"""`n` > 1 (docs/contract.md, "Several choices"): each choice repaired by a round loop of its own.

The first round goes upstream once with `n`; a choice needing another round is re-asked alone. Ollama ignores
`n`, and llama.cpp refuses it with an error the client gets.
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
    """Put on a queue after the last item."""


def count(body: JSONObject) -> int:
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def alone(body: JSONObject) -> JSONObject:
    return {k: v for k, v in body.items() if k != "n"}


@dataclass
class Finals(Final):
    """Every choice's answer in order (`each`); own fields are choice 0's, totals over all."""

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
        outcome = next((f.outcome for f in finals if f.outcome != om.Outcome.CLEAN), head.outcome)
        return cls(head.message, head.finish_reason, usage, head.mode, rounds, omens, head.meta, outcome,
                   head.extra, head.choice_extra, head.accepted, each=finals)




def split_chunk(piece: JSONObject) -> dict[int, JSONObject]:
    """A stream chunk split by choice, each part re-indexed 0; usage stays with choice 0."""
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
    """The loops of one request's choices."""

    def __init__(self, plan: Plan, later: Sender, runner: Callable[[Plan, Sender, Recorded], AsyncIterator[Shown]],
                 recorded: Callable[[RoundRecord, int], None] = lambda record, index: None) -> None:
        self.plan = plan
        self.later = later  # a round of one choice, sent alone
        self.runner = runner
        self.recorded = recorded
        self.lead_omens: list[om.Omen] = []  # other choices start with choice 0's omens and mode
        self.lead_mode = plan.mode
        self._out: asyncio.Queue[tuple[int, Shown | BaseException | Ended]] = asyncio.Queue()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._first_done = False

    def spawn(self, index: int, first: Sender) -> None:
        """Start choice `index`'s loop, its first round answered by `first`."""
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
        """Choice 0's Sender: `first` (with `n`) until a round answers, then rounds alone."""

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
        except BaseException as exc:  # noqa: BLE001 - the consumer raises it
            await self._out.put((index, exc))
        await self._out.put((index, Ended()))

    async def events(self, lead: Sender) -> AsyncIterator[tuple[int, Shown] | Finals]:
        """Every choice's events, then a Finals; any choice's error ends them all."""
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
    """A first round answered by an Answer in hand."""

    async def first(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        yield answer

    return first


ChunkQueue = asyncio.Queue[JSONObject | BaseException | Ended]


def queued_chunks(queue: ChunkQueue) -> AsyncIterator[JSONObject]:
    """The chunks put in `queue` until Ended, raising any exception put there."""

    async def chunks() -> AsyncIterator[JSONObject]:
        while True:
            item = await queue.get()
            if isinstance(item, Ended):
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    return chunks()
