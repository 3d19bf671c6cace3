"""Usage summed over rounds and choices: counts added, nested details too, other fields as first seen."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TypeGuard, cast

import orjson

from sanctum_proxy.core.shapes import JSONObject, Usage


def added(total: Usage | None, usage: Usage | None) -> Usage | None:
    """`usage` added to `total`; the first round's is copied as sent."""
    if not isinstance(usage, dict):
        return total
    return summed_usage(total, usage) if total is not None else cast(Usage, _copied(usage))


def summed_usage(total: Usage, usage: Usage) -> Usage:
    return cast(Usage, _summed(total, usage))


def _summed(total: Mapping[str, object], usage: Mapping[str, object]) -> JSONObject:
    out: JSONObject = dict(total)
    for key, value in usage.items():
        before = out.get(key, None)
        if key not in out:
            out[key] = _copied(value)
        elif _count(value) and _count(before):
            out[key] = before + value
        elif isinstance(value, dict) and isinstance(before, dict):
            out[key] = _summed(before, value)
    return out


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _copied(value: object) -> object:
    """A copy of JSON as the upstream sent it, faster than copy.deepcopy."""
    if not isinstance(value, dict | list):
        return value
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:  # an integer past 64 bits, deep nesting
        return copy.deepcopy(value)
