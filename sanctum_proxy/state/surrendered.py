"""Requests whose surrender error is recent, per process: the same request resent gets one round (docs/decisions.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

import orjson

from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.repair.plan import Plan

TTL_SECONDS = 120.0  # goose's retries wait about 1, 2 and 4 s
SIZE = 256


class SurrenderMemo:
    """When each request digest last surrendered; bounded in age and number."""

    def __init__(self, ttl: float = TTL_SECONDS, size: int = SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._at: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._at)

    def note(self, key: bytes) -> None:
        self._at[key] = self.clock()
        self._at.move_to_end(key)
        while len(self._at) > self.size:
            self._at.popitem(last=False)

    def age(self, key: bytes) -> float | None:
        """Seconds since this digest surrendered; None past the TTL."""
        now = self.clock()
        while self._at and now - next(iter(self._at.values())) > self.ttl:
            self._at.popitem(last=False)
        at = self._at.get(key)
        return None if at is None else now - at


def request_key(plan: Plan, client_key: bytes) -> bytes | None:
    """The request as planned, with the client's controls of its rounds; None for a body with no JSON form."""
    if plan.memo_key is not None:
        return plan.memo_key
    try:
        text = orjson.dumps([plan.upstream, client_key.decode("latin-1"), plan.on_surrender, plan.max_rounds,
                             plan.constrain, plan.auto, plan.body])
    except TypeError:
        return None
    return hashlib.blake2b(text, digest_size=16).digest()


def again(plan: Plan, memo: SurrenderMemo, client_key: bytes) -> Plan:
    """A recently surrendered request's plan: one round, then the surrender."""
    key = request_key(plan, client_key)
    ago = memo.age(key) if key is not None else None
    return plan if ago is None else dataclasses.replace(plan, max_rounds=0, surrendered_ago=ago, memo_key=key)


def remember(plan: Plan, memo: SurrenderMemo, client_key: bytes) -> None:
    key = request_key(plan, client_key)
    if key is not None:
        memo.note(key)


def told(error: ToolCallParseError, plan: Plan) -> ToolCallParseError:
    """The surrender saying why it had one round."""
    if plan.surrendered_ago is None:
        return error
    message = (f"{error.message}; the same request surrendered {plan.surrendered_ago:.0f} s before, so it had "
               "one round")
    return ToolCallParseError(message, rounds=error.rounds, rejected=error.rejected)
