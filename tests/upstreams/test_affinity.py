"""The session key of a request and the rendezvous order of a pool's backends (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from sanctum_proxy.upstreams.affinity import ranked, session_key

OPENING = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Plan a trip."}]


@dataclass
class B:
    base_url: str


POOL = [B(f"http://10.0.0.{i}:8080/v1") for i in range(1, 5)]


def test_the_session_key_is_the_first_the_request_has():
    body = {"messages": OPENING, "prompt_cache_key": "pck", "session_id": "sid"}
    assert session_key({"x-claude-code-session-id": "cc", "x-session-id": "xs"}, body) == b"x-claude-code-session-id:cc"
    assert session_key({"x-session-id": "xs"}, body) == b"prompt_cache_key:pck"
    assert session_key({"x-session-id": "xs"}, {**body, "prompt_cache_key": None}) == b"session_id:sid"
    assert session_key({"x-session-id": "xs"}, {"messages": OPENING}) == b"x-session-id:xs"


def test_later_turns_of_a_conversation_share_its_opening_key():
    first = session_key({}, {"messages": OPENING})
    later = session_key({}, {"messages": [*OPENING, {"role": "assistant", "content": "Where to?"},
                                          {"role": "user", "content": "Rome."}]})
    other = session_key({}, {"messages": [OPENING[0], {"role": "user", "content": "Plan a party."}]})
    assert first == later and first != other and first.startswith(b"opening:")


def test_a_backend_leaving_moves_only_the_sessions_it_held():
    keys = [f"session-{i}".encode() for i in range(400)]
    before = {k: ranked(k, POOL)[0].base_url for k in keys}
    assert len(set(before.values())) == 4  # every backend takes some
    gone = POOL[2]
    after = {k: ranked(k, [b for b in POOL if b is not gone])[0].base_url for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == gone.base_url for k in moved)
    # and its failover order is the same as the full ranking's next one
    assert all(after[k] == ranked(k, POOL)[1].base_url for k in moved)


def test_the_order_is_the_same_however_the_pool_is_listed():
    key = b"prompt_cache_key:abc"
    assert ranked(key, POOL) == ranked(key, list(reversed(POOL)))
