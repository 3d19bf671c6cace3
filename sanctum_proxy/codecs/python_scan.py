"""A tolerant reading of pythonic call lists, for text `ast` refuses: `[f(a=1), g(b='x')]` or calls one to a line."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][\w.]*")
_AFTER_VALUE = re.compile(r"[ \t]*(?:[,)\]}:]|\n|\Z)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
_LEADING_ZEROS = re.compile(r"(?<![\w.])0+(?=\d)")
PLACEHOLDER = "__sanctum_str_%d__"
MAX_READINGS = 64  # readings of one call tried (each string may end at several quotes)
MAX_STEPS = 250_000  # characters walked over all readings of one list: a bound on text built to branch


@dataclass(frozen=True)
class Piece:
    """One top-level call: where it is in the text, its source with strings swapped out, and the strings."""

    start: int
    end: int
    source: str
    strings: tuple[str, ...]


def calls(text: str, limit: int) -> list[Piece] | None:
    """The top-level calls of a list or of lines; None when anything else lies between them."""
    body, offset = _inside_brackets(text)
    out: list[Piece] = []
    k = 0
    steps = [MAX_STEPS]
    while len(out) < limit:
        k = _skip(body, k, " \t\r\n,;")
        if k >= len(body):
            return out
        name = _NAME.match(body, k)
        if name is None or not body.startswith("(", _skip(body, name.end(), " \t")):
            return out or None
        piece = next((p for p in _readings(body, k, offset, steps) if _fits(body, p, offset)), None)
        if piece is None:
            return out or None  # an unclosed or unreadable call: the ones before it stand
        out.append(piece)
        k = piece.end - offset
    return out


def bracketed(text: str, start: int, limit: int) -> int | None:
    """Where the call list opening at `start` ends, read as `calls` reads it; None when it is no call list."""
    k = start + 1
    steps = [MAX_STEPS]
    for _ in range(limit):
        k = _skip(text, k, " \t\r\n,;")
        if text.startswith("]", k):
            return k + 1
        name = _NAME.match(text, k)
        if name is None or not text.startswith("(", _skip(text, name.end(), " \t")):
            return None
        piece = next((p for p in _readings(text, k, 0, steps) if _fits(text, p, 0, " \t\r\n,;]")), None)
        if piece is None:
            return None
        k = piece.end
    return None


def _fits(body: str, piece: Piece, offset: int, stops: str = " \t\r\n,;") -> bool:
    """Whether a reading of a call parses as Python and ends where a separator or the end follows."""
    end = piece.end - offset
    if end < len(body) and body[end] not in stops:
        return False
    try:
        ast.parse(piece.source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _inside_brackets(text: str) -> tuple[str, int]:
    stripped = text.strip()
    lead = len(text) - len(text.lstrip())
    if stripped.startswith("["):
        inner = stripped[1:-1] if stripped.endswith("]") else stripped[1:]
        return inner, lead + 1
    return text, 0


def _skip(text: str, k: int, chars: str) -> int:
    while k < len(text) and text[k] in chars:
        k += 1
    return k


def _readings(text: str, start: int, offset: int, steps: list[int]) -> Iterator[Piece]:
    """The readings of the call at `start`, one per choice of string ends, within MAX_READINGS and `steps`."""
    budget = [MAX_READINGS]

    def walk(k: int, depth: int, out: list[str], strings: list[str]) -> Iterator[Piece]:
        while k < len(text):
            steps[0] -= 1
            if steps[0] <= 0:
                return
            c = text[k]
            if c in "'\"":
                for end, value in _string_ends(text, k, steps):
                    if budget[0] <= 0:
                        return
                    budget[0] -= 1
                    yield from walk(end, depth, [*out, PLACEHOLDER % len(strings)], [*strings, value])
                return
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    source = _LEADING_ZEROS.sub("", "".join(out) + c)
                    yield Piece(start + offset, k + 1 + offset, source, tuple(strings))
                    return
            out.append(c)
            k += 1

    yield from walk(start, 0, [], [])


def _string_ends(text: str, k: int, steps: list[int]) -> Iterator[tuple[int, str]]:
    """Where the string literal at `k` may end, first ones first, and its value up to there."""
    quote = text[k] * 3 if text.startswith(text[k] * 3, k) else text[k]
    i = k + len(quote)
    value: list[str] = []
    while i < len(text) and steps[0] > 0:
        steps[0] -= 1
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            value.append(_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
            i += 2
            continue
        if text.startswith(quote, i) and (len(quote) == 3 or _AFTER_VALUE.match(text, i + 1)):
            yield i + len(quote), "".join(value)
            if len(quote) == 3:
                return
        value.append(c)
        i += 1
