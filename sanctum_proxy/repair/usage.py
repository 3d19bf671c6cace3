"""Usage summed over rounds and choices: every count added, nested details too, other fields as first seen."""

from __future__ import annotations

import copy
from typing import Any


def added(total: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """One round's usage as sent (details and vendor fields kept); over rounds, every count is summed."""
    if not isinstance(usage, dict):
        return total
    return summed_usage(total, usage) if total is not None else copy.deepcopy(usage)


def summed_usage(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """Usage of several answers (rounds, choices): counts added, nested details too, other fields as first seen."""
    out = dict(total)
    for key, value in usage.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif _count(value) and _count(out[key]):
            out[key] += value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = summed_usage(out[key], value)
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
