"""One JSON access line per request on the logger `sanctum_proxy.access`, in place of uvicorn's."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.config import LOGGING_CONFIG

if TYPE_CHECKING:  # state/traces.py imports the repair loop
    from sanctum_proxy.state.traces import TraceDoc

LOGGER = logging.getLogger("sanctum_proxy.access")


def line(doc: TraceDoc) -> str:
    return _chat_line(doc["id"], doc["request_id"], doc["model"], doc["mode"], doc["stream"], len(doc["rounds"]),
                      doc["outcome"], doc["status"], doc["latency_ms"])


def refused_line(request_id: str | None, status: int) -> str:
    """Turned away before it had a trace."""
    return _chat_line(None, request_id, None, None, None, 0, "error", status, None)


def _chat_line(trace_id: str | None, request_id: str | None, model: str | None, mode: str | None,
               stream: bool | None, rounds: int, outcome: str, status: int, latency_ms: float | None) -> str:
    return orjson.dumps({
        "event": "chat_request", "trace_id": trace_id, "request_id": request_id, "model": model, "mode": mode,
        "stream": stream, "rounds": rounds, "outcome": outcome, "status": status, "latency_ms": latency_ms,
    }).decode()


def emit(text: str) -> None:
    """Without logging's caller lookup, which walks the stack."""
    if LOGGER.isEnabledFor(logging.INFO):
        LOGGER.handle(LOGGER.makeRecord(LOGGER.name, logging.INFO, __file__, 0, text, (), None))


LOGGED = "sanctum_access_logged"  # in the request's state: its line is written


def http_line(method: str, path: str, status: int | None, latency_ms: float, request_id: str | None) -> str:
    return orjson.dumps({"event": "http_request", "method": method, "path": path, "status": status,
                         "latency_ms": round(latency_ms, 3), "request_id": request_id}).decode()


class AccessLog:
    """ASGI middleware: the line of every request nobody else logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not LOGGER.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state: dict[str, Any] = scope.setdefault("state", {})
        status: int | None = None

        def watched(message: Message) -> Awaitable[None]:
            # not async: no coroutine per body write
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            status = status or 500  # answered by Starlette's outer error middleware
            raise
        finally:
            if state.get("trace") is None and not state.get(LOGGED):
                given = next((v for k, v in scope.get("headers", ()) if k == b"x-request-id"), None)
                emit(http_line(scope["method"], scope["path"], status, (time.perf_counter() - start) * 1000,
                               given[:200].decode("latin-1") if given else None))


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's config plus a plain handler for the access lines."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["sanctum_json"] = {"format": "%(message)s"}
    config["handlers"]["sanctum_access"] = {"class": "logging.StreamHandler", "formatter": "sanctum_json",
                                            "stream": "ext://sys.stderr"}
    config["loggers"][LOGGER.name] = {"handlers": ["sanctum_access"], "level": level.upper(),
                                      "propagate": False}
    return config
