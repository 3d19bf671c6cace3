"""The access log: one JSON line per chat request on the logger `sanctum_proxy.access`, and the logging
config that shows it beside uvicorn's own logs."""

from __future__ import annotations

import copy
import logging
from typing import Any

import orjson
from uvicorn.config import LOGGING_CONFIG

LOGGER = logging.getLogger("sanctum_proxy.access")


def line(doc: dict[str, Any]) -> str:
    """{"event", "trace_id", "request_id", "model", "mode", "stream", "rounds", "outcome", "status",
    "latency_ms"} as one line of JSON."""
    return orjson.dumps({
        "event": "chat_request", "trace_id": doc["id"], "request_id": doc["request_id"],
        "model": doc["model"], "mode": doc["mode"], "stream": doc["stream"], "rounds": len(doc["rounds"]),
        "outcome": doc["outcome"], "status": doc["status"], "latency_ms": doc["latency_ms"],
    }).decode()


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config plus a plain `%(message)s` handler for the access lines (already JSON)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["sanctum_json"] = {"format": "%(message)s"}
    config["handlers"]["sanctum_access"] = {"class": "logging.StreamHandler", "formatter": "sanctum_json",
                                            "stream": "ext://sys.stderr"}
    config["loggers"][LOGGER.name] = {"handlers": ["sanctum_access"], "level": level.upper(),
                                      "propagate": False}
    return config
