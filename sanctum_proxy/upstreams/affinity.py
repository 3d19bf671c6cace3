"""One backend per conversation in a pool of several: its session key, and the backends in that key's order.

An upstream's prompt cache serves a correction round (the same prompt plus two turns) and a session's next
turn only on the server that saw the prompt. So every round of a request, and every turn of a session, goes
to the first healthy backend in its key's order; the next one takes over only when that one fails.

The key, the first that the request has: the `X-Claude-Code-Session-Id` header (Claude Code), the body's
`prompt_cache_key` (Codex, the OpenAI SDKs), its `session_id` or the `X-Session-Id` header, else a hash of the
conversation's opening (its system text and first user message), which every turn of it repeats.

The order is rendezvous hashing (highest random weight): each backend's weight is a hash of (key, its URL),
so the mapping needs no table (bounded: nothing is kept per session) and is the same on every replica; a
backend leaving moves only the sessions it held, and those come back when it does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

import orjson

# The session key of the request being answered (set by `pin`), read by Upstream.candidates on every round.
SESSION: ContextVar[bytes | None] = ContextVar("sanctum_session", default=None)
HEADERS = ("x-claude-code-session-id",)
LATE_HEADERS = ("x-session-id",)
BODY_KEYS = ("prompt_cache_key",)
LATE_BODY_KEYS = ("session_id",)
MAX_KEY = 512  # characters of a client's key that count


class HasUrl(Protocol):
    base_url: str


B = TypeVar("B", bound=HasUrl)


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> bytes:
    """What identifies the request's conversation (see the module docstring), as bytes to hash."""
    for source, names in ((headers, HEADERS), (body, BODY_KEYS), (body, LATE_BODY_KEYS), (headers, LATE_HEADERS)):
        for name in names:
            value = source.get(name)
            if isinstance(value, str) and value:
                return f"{name}:{value[:MAX_KEY]}".encode()
    return b"opening:" + opening(body.get("messages"))


def opening(messages: object) -> bytes:
    """The system text and the first user message, which every later turn of the conversation repeats."""
    system: list[object] = []
    first: object = None
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(message.get("content"))
        elif role == "user":
            first = message.get("content")
            break
    try:
        return hashlib.blake2b(orjson.dumps([system, first]), digest_size=16).digest()
    except TypeError:  # not JSON (checked requests always are): no opening to share
        return b""


def ranked(key: bytes, backends: Sequence[B]) -> list[B]:
    """`backends` by their weight for `key`, heaviest first (rendezvous hashing)."""
    return sorted(backends, key=lambda b: _weight(key, b.base_url), reverse=True)


def _weight(key: bytes, url: str) -> bytes:
    return hashlib.blake2b(key + b"\x00" + url.encode(), digest_size=8).digest()


def pin(backends: Sequence[HasUrl], headers: Mapping[str, str], body: Mapping[str, Any]) -> None:
    """Keep this request's rounds on one backend of a pool of several (a pool of one needs nothing)."""
    if len(backends) > 1:
        SESSION.set(session_key(headers, body))
