"""Where the HTTP client's exceptions and upstream error answers become the proxy's errors."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

from sanctum_proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable

MAX_ERROR_BODY = 1024 * 1024
MAX_ERROR_TEXT = 2000


@asynccontextmanager
async def mapped_errors() -> AsyncIterator[None]:
    """As 502 unreachable or 504 timeout."""
    try:
        yield
    except TimeoutError as exc:
        raise UpstreamTimeout(f"upstream did not answer in time ({type(exc).__name__})") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise UpstreamUnreachable(f"upstream unreachable: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    """Without the client's text: it names the upstream's address."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(exc, OSError) and not isinstance(exc, aiohttp.ClientError):
        os_error = exc
    number = getattr(os_error, "errno", None)  # its strerror may name the address
    return f"{type(exc).__name__} ({os.strerror(number)})" if isinstance(number, int) else type(exc).__name__


def redirect_error(status: int) -> UpstreamError:
    """Never followed; the target may be inside the upstream's network."""
    return UpstreamError(502, f"upstream answered with a redirect ({status}); redirects are not followed")


def too_long(limit: int) -> UpstreamError:
    return UpstreamError(502, f"upstream answer is over the limit of {limit} bytes (max_answer_bytes)")


def error_message(body: bytes) -> str:
    """The error body's message, else its text."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _clip(body.decode("utf-8", "replace").strip()) or "upstream error with an empty body"
    if isinstance(parsed, dict):
        err = parsed.get("error", parsed.get("detail", parsed.get("message")))
        if isinstance(err, dict):
            message = err.get("message")
            return _clip(message if isinstance(message, str) and message else _shown(err))
        if err is not None:
            return _clip(err if isinstance(err, str) else _shown(err))
    return _clip(_shown(parsed))


def upstream_error(status: int, body: bytes) -> UpstreamError:
    """The message and scalar fields of a masked error body, clipped."""
    try:
        raw: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raw = _clip(body.decode("utf-8", "replace"))
    if isinstance(raw, dict) and isinstance(raw.get("error"), dict):
        raw = {"error": {k: _clip(v) if isinstance(v, str) else v for k, v in raw["error"].items()
                         if isinstance(k, str) and (v is None or isinstance(v, str | int | float | bool))}}
    elif not isinstance(raw, str):
        raw = None
    return UpstreamError(status, error_message(body), raw)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "..."


def _shown(value: Any) -> str:
    """Clipped JSON: str() of a deep value would recurse."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()[:MAX_ERROR_TEXT]
    except orjson.JSONEncodeError:
        return "(an error object too deep to show)"
