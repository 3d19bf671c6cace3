"""One backend per conversation in a pool, so its prompt cache serves later rounds.

Rendezvous hashing of a session key, or of the conversation's opening, orders backends alike on every replica.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

import orjson

SESSION: ContextVar[bytes | None] = ContextVar("sanctum_session", default=None)
HEADERS = ("x-claude-code-session-id",)
LATE_HEADERS = ("x-session-id",)
BODY_KEYS = ("prompt_cache_key",)
LATE_BODY_KEYS = ("session_id",)
MAX_KEY = 512


class HasUrl(Protocol):
    base_url: str


B = TypeVar("B", bound=HasUrl)


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> bytes:
    for source, names in ((headers, HEADERS), (body, BODY_KEYS), (body, LATE_BODY_KEYS), (headers, LATE_HEADERS)):
        for name in names:
            value = source.get(name)
            if isinstance(value, str) and value:
                return f"{name}:{value[:MAX_KEY]}".encode()
    return b"opening:" + opening(body.get("messages"))


def opening(messages: object) -> bytes:
    """The system text and first user message: every later turn repeats them."""
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
    except TypeError:  # not JSON: no opening to share
        return b""


def ranked(key: bytes, backends: Sequence[B]) -> list[B]:
    return sorted(backends, key=lambda b: _weight(key, b.base_url), reverse=True)


def _weight(key: bytes, url: str) -> bytes:
    return hashlib.blake2b(key + b"\x00" + url.encode(), digest_size=8).digest()


def pin(backends: Sequence[HasUrl], headers: Mapping[str, str], body: Mapping[str, Any]) -> None:
    if len(backends) > 1:
        SESSION.set(session_key(headers, body))
