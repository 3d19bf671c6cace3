"""json_repair as the last resort for broken JSON: capped per text and per answer, and refused where it invents."""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Iterator
from typing import Any

import json_repair

from sanctum_proxy.core.decoded_json import MAX_DEPTH, Decoded, Undecodable

# json_repair is slow pure Python: past this only the cheap rules run.
MAX_FALLBACK_CHARS = 16_000
# One answer's calls share this many json_repair characters (`fallback_budget`).
MAX_FALLBACK_PER_ANSWER = 48_000
# [characters left, the budget]
_FALLBACK_LEFT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("sanctum_json_repair_left",
                                                                                  default=None)


@contextlib.contextmanager
def fallback_budget(chars: int = MAX_FALLBACK_PER_ANSWER) -> Iterator[None]:
    """Every `decode` inside shares `chars` characters of json_repair."""
    token = _FALLBACK_LEFT.set([chars, chars])
    try:
        yield
    finally:
        _FALLBACK_LEFT.reset(token)


_BRACKETS = re.compile(r"""\"(?:[^"\\]|\\.)*\"?|'(?:[^'\\]|\\.)*'?|[{}\[\]]""", re.S)  # linear: see _QUICK


def _nesting(s: str) -> int:
    """How deep brackets outside strings go (linear; an unclosed bracket counts)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(s):
        tok = m.group()
        if tok in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "}]":
            depth = max(0, depth - 1)
    return deepest


def by_json_repair(s: str, repairs: dict[str, None]) -> Decoded | Undecodable:
    """`s` mended by json_repair, unless it is too long, too deep, over the budget or the mend invents."""
    if len(s) > MAX_FALLBACK_CHARS:
        return Undecodable("the JSON is broken beyond the local rules")
    if _nesting(s) > MAX_DEPTH:  # json_repair recurses per level
        return Undecodable("the JSON is nested too deeply")
    left = _FALLBACK_LEFT.get()
    if left is not None:
        if len(s) > left[0]:
            return Undecodable(f"the answer's broken JSON is over the {left[1]} characters the "
                               "proxy repairs per answer with json_repair")
        left[0] -= len(s)
    try:
        value, log = json_repair.repair_json(s, return_objects=True, logging=True)
    except (ValueError, RecursionError, IndexError, TypeError, AssertionError):  # json_repair asserts on some
        return Undecodable("the JSON could not be repaired")
    if any("closing quote" in str(entry.get("text", "")) for entry in log):
        return Undecodable("a string value is cut off")
    if not isinstance(value, dict | list) or not value:
        return Undecodable("the JSON could not be repaired")
    if _invents(value, s):
        return Undecodable("repairing the JSON would invent values that are not in the text")
    repairs["json_repair"] = None
    return Decoded(value, tuple(repairs))


def _invents(value: Any, text: str) -> bool:
    """True when the repaired value holds a string or null the text lacks."""
    todo: list[Any] = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, str):
            if not v:
                if '""' not in text and "''" not in text:
                    return True
            elif v not in text and json.dumps(v, ensure_ascii=False)[1:-1] not in text:
                return True
        elif v is None and "null" not in text and "None" not in text:
            return True
    return False
