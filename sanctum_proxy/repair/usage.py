"""Usage summed over rounds and choices: every count added, nested details too, other fields as first seen."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeGuard, cast

from sanctum_proxy.core.shapes import Usage


def added(total: Usage | None, usage: Usage | None) -> Usage | None:
    """One round's usage as sent (details and vendor fields kept); over rounds, every count is summed."""
    if not isinstance(usage, dict):
        return total
    return cast(Usage, summed_usage(total, usage)) if total is not None else copy.deepcopy(usage)


def summed_usage(total: Mapping[str, object], usage: Mapping[str, object]) -> dict[str, Any]:
    """Usage of several answers (rounds, choices): counts added, nested details too, other fields as first seen.
    A plain dict: routes/choices.py sums the choices' Final.usage (a Usage once routes/ is typed)."""
    out: dict[str, Any] = dict(total)
    for key, value in usage.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif _count(value) and _count(out[key]):
            out[key] += value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = summed_usage(out[key], value)
    return out


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
