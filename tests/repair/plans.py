"""A round-loop Plan for the repair tests (test_loop drives `run` with it, test_state_machine calls the steps)."""

from __future__ import annotations

from typing import Any

from sanctum_proxy.repair.loop_data import Plan
from sanctum_proxy.repair.toolbox import Toolbox


def make_plan(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **overrides: Any) -> Plan:
    """Native, not auto, two repair rounds, constrain off, fresh call ids; `body=` adds to the request body."""
    body = {"model": "m", "messages": messages, "tools": tools, **overrides.pop("body", {})}
    ids = iter(range(1000))
    fields: dict[str, Any] = {"book": Toolbox.from_tools(body["tools"]) if body.get("tools") else None,
                              "mode": "native", "auto": False, "max_rounds": 2, "constrain": "off",
                              "new_id": lambda: f"call_new{next(ids)}"}
    fields.update(overrides)
    return Plan(body=body, **fields)
