"""state/surrendered.SurrenderMemo on its own: bounded in age (TTL) and number, oldest out first; the proxy's use
of it is tests/routes/test_retried_surrender.py."""

from __future__ import annotations

from dataclasses import replace

from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.state.surrendered import SurrenderMemo, request_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_surrender_is_remembered_until_its_ttl_passes() -> None:
    clock = Clock()
    memo = SurrenderMemo(ttl=120, clock=clock)
    memo.note(b"a")
    clock.now += 119
    assert memo.age(b"a") == 119 and memo.age(b"b") is None
    clock.now += 2
    assert memo.age(b"a") is None and len(memo) == 0


def test_surrendering_again_starts_its_ttl_again() -> None:
    clock = Clock()
    memo = SurrenderMemo(ttl=120, clock=clock)
    memo.note(b"a")
    clock.now += 100
    memo.note(b"a")
    clock.now += 100
    assert memo.age(b"a") == 100


def test_past_its_size_the_oldest_surrender_goes_first() -> None:
    memo = SurrenderMemo(size=2, clock=Clock())
    for key in (b"a", b"b", b"a", b"c"):
        memo.note(key)
    assert len(memo) == 2 and memo.age(b"b") is None and memo.age(b"a") == 0 and memo.age(b"c") == 0


def test_the_key_tells_upstreams_clients_bodies_and_controls_apart() -> None:
    plan = Plan(body={"model": "m", "messages": [{"role": "user", "content": "Hi"}]}, book=None, mode="native",
                auto=True, max_rounds=2, upstream="u")
    others = [replace(plan, upstream="v"), replace(plan, body={**plan.body, "model": "n"}),
              replace(plan, on_surrender="last_call"), replace(plan, max_rounds=3), replace(plan, constrain="always")]
    keys = {request_key(plan, b"k"), request_key(plan, b"j"), *(request_key(p, b"k") for p in others)}
    assert len(keys) == 7 and request_key(replace(plan, body=dict(plan.body)), b"k") == request_key(plan, b"k")
    assert request_key(replace(plan, mode="prompted"), b"k") == request_key(plan, b"k")  # auto mode may flip
