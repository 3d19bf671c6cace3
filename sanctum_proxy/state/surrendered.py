"""Requests that recently ended in a surrender error, remembered per process, so the same request sent again (a
client that retries errors: goose resends it up to three more times) gets one round, not the hidden rounds again.

Entries are digests of (upstream, client key, the request as planned); nothing is hashed while none is held.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

import orjson

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.repair.plan import Plan

# goose's retries wait about 1, 2 and 4 s (doubling from 1 s, capped at 30 s) after rounds of their own.
TTL_SECONDS = 120.0
SIZE = 256  # 16-byte digests; past this the oldest goes


class SurrenderMemo:
    """Digests of surrendered requests and when each last surrendered; bounded in age and number."""

    def __init__(self, ttl: float = TTL_SECONDS, size: int = SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._at: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._at)

    def note(self, key: bytes) -> None:
        """The request with this digest surrendered now."""
        self._at[key] = self.clock()
        self._at.move_to_end(key)
        while len(self._at) > self.size:
            self._at.popitem(last=False)

    def age(self, key: bytes) -> float | None:
        """Seconds since the request with this digest surrendered, or None if not within the TTL."""
        now = self.clock()
        while self._at and now - next(iter(self._at.values())) > self.ttl:
            self._at.popitem(last=False)  # oldest first: expired ones leave before any lookup
        at = self._at.get(key)
        return None if at is None else now - at


def request_key(upstream: str, client_key: bytes, body: JSONObject) -> bytes | None:
    """The digest a request is remembered by; None for a body that has no one JSON form."""
    try:
        text = orjson.dumps([upstream, client_key.decode("latin-1"), body])
    except TypeError:
        return None
    return hashlib.blake2b(text, digest_size=16).digest()


def again(plan: Plan, memo: SurrenderMemo, client_key: bytes) -> Plan:
    """The plan of a request that surrendered within the TTL: one round, then the surrender at once."""
    key = request_key(plan.upstream, client_key, plan.body)
    ago = memo.age(key) if key is not None else None
    return plan if ago is None else dataclasses.replace(plan, max_rounds=0, surrendered_ago=ago)


def remember(plan: Plan, memo: SurrenderMemo, client_key: bytes) -> None:
    """This request's surrender reaches the client as an error: a resent copy gets one round."""
    key = request_key(plan.upstream, client_key, plan.body)
    if key is not None:
        memo.note(key)


def told(error: ToolCallParseError, plan: Plan) -> ToolCallParseError:
    """The surrender saying, where it was one, why this request had a single round."""
    if plan.surrendered_ago is None:
        return error
    message = (f"{error.message}; the same request surrendered {plan.surrendered_ago:.0f} s before, so it had "
               "one round")
    return ToolCallParseError(message, rounds=error.rounds, rejected=error.rejected)
