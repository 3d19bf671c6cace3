"""Who may call what: client keys for the protocols, the admin key for /sanctum/* and /metrics."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request
from starlette.datastructures import Headers
from starlette.types import Scope

from sanctum_proxy.errors import Unauthorized
from sanctum_proxy.services import services


class KeyRing:
    """`api_keys_file` is re-read when it changes: a rotated Secret needs no restart."""

    def __init__(self, listed: list[str], file: str | None = None, admin: str | None = None) -> None:
        self._listed = tuple(k.encode() for k in listed if k)
        self._file = Path(file) if file else None
        self._stamp: tuple[int, int] | None = None
        self._from_file: tuple[bytes, ...] = ()
        self.admin = admin.encode() if admin else None

    def client_keys(self) -> tuple[bytes, ...]:
        return self._listed + self._read_file()

    def _read_file(self) -> tuple[bytes, ...]:
        if self._file is None:
            return ()
        try:
            info = os.stat(self._file)
        except OSError:
            return self._from_file  # a Secret being swapped
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp != self._stamp:
            lines = self._file.read_text(encoding="utf-8").splitlines()
            self._from_file = tuple(k.strip().encode() for k in lines if k.strip() and not k.startswith("#"))
            self._stamp = stamp
        return self._from_file

    def client_required(self) -> bool:
        return bool(self._listed or self._file)


def presented_key(scope: Scope) -> bytes:
    """The bearer token, else `x-api-key` (the anthropic SDKs'), else empty."""
    headers = Headers(scope=scope)
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return token.strip().encode()
    return headers.get("x-api-key", "").strip().encode()


KEY_HEADERS = (b"authorization", b"x-api-key")


def repeated_key_header(headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...]) -> str | None:
    """A key header sent twice: the key checked and the key counted must be one."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name in KEY_HEADERS:
            if name in seen:
                return name.decode()
            seen.add(name)
    return None


def forwarded_key(request: Request) -> str | None:
    """As an Authorization header for the upstream."""
    given = request.headers.get("authorization")
    if given:
        return given
    key = request.headers.get("x-api-key", "").strip()
    return f"Bearer {key}" if key else None


def matches(given: bytes, keys: tuple[bytes, ...]) -> bool:
    """In constant time against every key, so no timing tells which came close."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


@dataclass(frozen=True)
class ClientKey:
    """A request's key, read once: checked, telling clients apart, forwarded where set."""

    presented: bytes
    upstream: str | None  # the Authorization header for the upstream under `forward_client_key`, else None


def check_client_key(request: Request) -> ClientKey:
    """The request's key, refused (401) where the ring does not hold it."""
    parts = services(request)
    given = presented_key(request.scope)
    refused = key_refused(parts.keys, given)
    if refused is not None:
        raise refused
    return ClientKey(given, forwarded_key(request) if parts.settings.forward_client_key else None)


def key_refused(ring: KeyRing, given: bytes) -> Unauthorized | None:
    """The 401 for a client key `ring` does not hold, where keys are required; else None."""
    if ring.client_required() and not matches(given, ring.client_keys()):
        return Unauthorized("Missing or incorrect API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')")
    return None


def check_admin_key(request: Request) -> None:
    """A client key never reads another client's traces."""
    ring = services(request).keys
    if ring.admin is None:
        if ring.client_required():
            raise Unauthorized("Traces, status and metrics take the admin key, and none is set: set admin_key "
                               "(client keys never read them)")
        return
    if not matches(presented_key(request.scope), (ring.admin,)):
        raise Unauthorized("Missing or incorrect admin key: send 'Authorization: Bearer <admin key>'")
