"""JSON whose strings a model wrote unescaped (raw newlines, bare quotes), read only where unambiguous.

Structure stays strict; a bare quote ends a string only where what follows continues the structure, and a string
never holds a member's start. Every reading is tried by backtracking; exactly one must succeed. A step budget caps
hostile text.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 32
MAX_STEPS = 20_000
MAX_CHARS = 64 * 1024
MAX_MEMBERS = 128  # members or items; each one a nested generator

_WS = re.compile(r"[ \t\r\n]*")
_KEY = re.compile(r'"((?:[^"\\\x00-\x1f]|\\.)*)"')
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
# The structure between two members, or before an object's first (found at every start, overlapping).
_STRUCTURE = re.compile(r'(?=([,{]\s*"(?:[^"\\\n]|\\.){0,200}"\s*:))')
_BACKSLASH = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])|\\')  # a lone backslash is invalid
_LITERALS = {"true": True, "false": False, "null": None}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class Loose:
    value: Any
    end: int  # just past the value
    repairs: tuple[str, ...]  # unescaped_quotes, control_characters


class _Budget(Exception):
    pass


@dataclass(frozen=True)
class _Span:
    """A string value's body `text[start:end]`, decoded once the reading is the only one."""

    start: int
    end: int


_Read = tuple[Any, int]  # strings as _Span


def read(text: str, start: int, *, to_end: bool = False) -> Loose | None:
    """The one reading of the object or array at `text[start]`, or None; with `to_end` it must end the text."""
    if start >= len(text) or text[start] not in "{[" or len(text) - start > MAX_CHARS:
        return None
    reader = _Reader(text)
    found: list[_Read] = []
    try:
        for reading in reader.value(start, 0):
            if to_end and _WS.match(text, reading[1]).end() != len(text):  # type: ignore[union-attr]
                continue
            found.append(reading)
            if len(found) > 1:
                return None
    except (_Budget, RecursionError):
        return None
    if len(found) != 1:
        return None
    marks: set[str] = set()
    value = _decoded(found[0][0], text, marks)
    return Loose(value, found[0][1], tuple(r for r in ("unescaped_quotes", "control_characters") if r in marks))


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.steps = text, 0
        self.quotes = [m.start() for m in re.finditer('"', text) if not _escaped(text, m.start())]
        self.invalid = [m.start() for m in _BACKSLASH.finditer(text) if len(m.group()) == 1]
        # structure_end[i]: the least end of a member start at or after starts[i]
        matches = [(m.start(), m.start() + len(m.group(1))) for m in _STRUCTURE.finditer(text)]
        self.starts = [a for a, _ in matches]
        self.structure_end = [b for _, b in matches]
        for i in range(len(self.structure_end) - 2, -1, -1):
            self.structure_end[i] = min(self.structure_end[i], self.structure_end[i + 1])

    def _step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _Budget

    def _ws(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def value(self, pos: int, depth: int) -> Iterator[_Read]:
        self._step()
        if depth > MAX_DEPTH or pos >= len(self.text):
            return
        c = self.text[pos]
        if c == "{":
            yield from self._object(pos + 1, depth + 1)
        elif c == "[":
            yield from self._array(pos + 1, depth + 1)
        elif c == '"':
            yield from self._string(pos)
        else:
            m = _NUMBER.match(self.text, pos)
            if m:
                yield json.loads(m.group()), m.end()
                return
            for word, literal in _LITERALS.items():
                if self.text.startswith(word, pos):
                    yield literal, pos + len(word)

    def _object(self, pos: int, depth: int) -> Iterator[_Read]:
        pos = self._ws(pos)
        if self.text.startswith("}", pos):
            yield {}, pos + 1
            return
        yield from self._members(pos, depth, {})

    def _members(self, pos: int, depth: int, sofar: dict[str, Any]) -> Iterator[_Read]:
        self._step()
        if len(sofar) >= MAX_MEMBERS:
            return
        m = _KEY.match(self.text, pos)
        if not m:
            return
        key = _unescape(m.group(1), set(), strict=True)
        if key is None or key in sofar:
            return
        colon = self._ws(m.end())
        if not self.text.startswith(":", colon):
            return
        for value, end in self.value(self._ws(colon + 1), depth):
            after = self._ws(end)
            members = {**sofar, key: value}
            if self.text.startswith("}", after):
                yield members, after + 1
            elif self.text.startswith(",", after):
                yield from self._members(self._ws(after + 1), depth, members)

    def _array(self, pos: int, depth: int) -> Iterator[_Read]:
        pos = self._ws(pos)
        if self.text.startswith("]", pos):
            yield [], pos + 1
            return
        yield from self._items(pos, depth, [])

    def _items(self, pos: int, depth: int, sofar: list[Any]) -> Iterator[_Read]:
        self._step()
        if len(sofar) >= MAX_MEMBERS:
            return
        for value, end in self.value(pos, depth):
            after = self._ws(end)
            items = [*sofar, value]
            if self.text.startswith("]", after):
                yield items, after + 1
            elif self.text.startswith(",", after):
                yield from self._items(self._ws(after + 1), depth, items)

    def _string(self, pos: int) -> Iterator[_Read]:
        """Each way the string at `pos` may end: at a later quote, before a non-JSON escape or a member's start."""
        limit = len(self.text)
        i = bisect_left(self.invalid, pos + 1)
        if i < len(self.invalid):
            limit = self.invalid[i]
        j = bisect_left(self.starts, pos + 1)
        if j < len(self.starts):
            limit = min(limit, self.structure_end[j] - 1)  # a body ending there holds it
        for q in self.quotes[bisect_right(self.quotes, pos):]:
            if q >= limit:
                return
            self._step()
            yield _Span(pos + 1, q), q + 1


def _decoded(value: Any, text: str, marks: set[str]) -> Any:
    if isinstance(value, _Span):
        return _unescape(text[value.start : value.end], marks, strict=False)
    if isinstance(value, dict):
        return {k: _decoded(v, text, marks) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v, text, marks) for v in value]
    return value


def _escaped(text: str, at: int) -> bool:
    n = 0
    while at - n - 1 >= 0 and text[at - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def _unescape(body: str, seen: set[str], *, strict: bool) -> str | None:
    """A string's text with JSON escapes read; `strict` (a key) refuses raw control characters and bare quotes."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
                continue
            return None
        if c == '"':
            if strict:
                return None
            seen.add("unescaped_quotes")
        elif c < " ":
            if strict:
                return None
            seen.add("control_characters")
        out.append(c)
        i += 1
    return "".join(out)
