"""Who may call what: client keys for /v1/*, the admin key for /sanctum/* and /metrics.

Client keys come from `api_keys` and `api_keys_file` (one key per line, `#` comments; re-read when the
file changes, so a rotated Kubernetes Secret needs no restart). Tenants stay apart: the traces (every
client's prompts and answers), `/sanctum/status` and `/metrics` take only `admin_key`, never a client key.
Where client keys are set and no `admin_key` is, they are closed (401, the message says to set one); with
no key configured at all (a proxy on localhost) they are open like the rest. Keys are compared in constant
time, each against every key, so neither the answer nor its timing tells which key came close.
`check_client_key` / `check_admin_key` raise Unauthorized (401 invalid_api_key).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from fastapi import Request

from sanctum_proxy.errors import Unauthorized
from sanctum_proxy.services import services


class KeyRing:
    """The client keys (`api_keys`, and `api_keys_file` re-read when it changes) and the `admin_key`."""

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
            return self._from_file  # a Secret being swapped: keep the last keys read
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp != self._stamp:
            lines = self._file.read_text(encoding="utf-8").splitlines()
            self._from_file = tuple(k.strip().encode() for k in lines if k.strip() and not k.startswith("#"))
            self._stamp = stamp
        return self._from_file

    def client_required(self) -> bool:
        return bool(self._listed or self._file)


def presented_key(request: Request) -> bytes:
    """The bearer token of the Authorization header, else the `x-api-key` header (the anthropic SDKs' way),
    else empty."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return token.strip().encode()
    return request.headers.get("x-api-key", "").strip().encode()


KEY_HEADERS = (b"authorization", b"x-api-key")


def repeated_key_header(headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...]) -> str | None:
    """The key header a request sends twice (one request, one key: the key checked and the key whose share is
    counted must be the same), else None."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name in KEY_HEADERS:
            if name in seen:
                return name.decode()
            seen.add(name)
    return None


def forwarded_key(request: Request) -> str | None:
    """The client's key as an Authorization header for the upstream (`forward_client_key`): its own
    Authorization header, or its `x-api-key` as a bearer token."""
    given = request.headers.get("authorization")
    if given:
        return given
    key = request.headers.get("x-api-key", "").strip()
    return f"Bearer {key}" if key else None


def matches(given: bytes, keys: tuple[bytes, ...]) -> bool:
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


def check_client_key(request: Request) -> None:
    refused = key_refused(services(request).keys, presented_key(request))
    if refused is not None:
        raise refused


def key_refused(ring: KeyRing, given: bytes) -> Unauthorized | None:
    """The 401 for a client key `ring` does not hold, where keys are required; else None."""
    if ring.client_required() and not matches(given, ring.client_keys()):
        return Unauthorized("Missing or incorrect API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')")
    return None


def check_admin_key(request: Request) -> None:
    """/sanctum/* JSON and /metrics: the admin key only (a client key never reads another client's traces)."""
    ring = services(request).keys
    if ring.admin is None:
        if ring.client_required():
            raise Unauthorized("Traces, status and metrics take the admin key, and none is set: set admin_key "
                               "(client keys never read them)")
        return
    if not matches(presented_key(request), (ring.admin,)):
        raise Unauthorized("Missing or incorrect admin key: send 'Authorization: Bearer <admin key>'")
