"""A tolerant reading of pythonic call lists, for text `ast` refuses: `[f(a=1), g(b='x')]` or calls one to a line.

The text is cut into its top-level calls (`NAME(...)` at bracket depth 0) by a scanner that knows strings; each
call is then read on its own, so one bad call costs only itself. The scanner reads strings the way models write
them rather than as Python does: a raw newline inside a string is part of it, and a quote is a string's end only
when what follows could follow a value (`,`, `)`, `]`, `}`, `:` or the end), so `'it's'` is one string. Each
string is then swapped for a placeholder name before `ast` reads the call, and integers lose their leading zeros.
Nothing is evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][\w.]*")
_AFTER_VALUE = re.compile(r"[ \t]*(?:[,)\]}:]|\n|\Z)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
_LEADING_ZEROS = re.compile(r"(?<![\w.])0+(?=\d)")
PLACEHOLDER = "__sanctum_str_%d__"


@dataclass(frozen=True)
class Piece:
    """One top-level call: where it is in the text, its source with strings swapped out, and the strings."""

    start: int
    end: int
    source: str
    strings: tuple[str, ...]


def calls(text: str, limit: int) -> list[Piece] | None:
    """The top-level calls of a list (`[...]`, brackets optional) or of lines; None when anything else lies
    between them (prose: the text is not a call list)."""
    body, offset = _inside_brackets(text)
    out: list[Piece] = []
    k = 0
    while len(out) < limit:
        k = _skip(body, k, " \t\r\n,;")
        if k >= len(body):
            return out
        name = _NAME.match(body, k)
        if name is None or not body.startswith("(", _skip(body, name.end(), " \t")):
            return None
        piece = _call(body, k, offset)
        if piece is None:
            return out or None  # an unclosed last call: the ones before it stand
        out.append(piece)
        k = piece.end - offset
    return out


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


def _call(text: str, start: int, offset: int) -> Piece | None:
    """The call opening at `start`, to its matching `)`; None when it never closes."""
    out: list[str] = []
    strings: list[str] = []
    depth = 0
    k = start
    while k < len(text):
        c = text[k]
        if c in "'\"":
            end, value = _string(text, k)
            out.append(PLACEHOLDER % len(strings))
            strings.append(value)
            k = end
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                out.append(c)
                source = _LEADING_ZEROS.sub("", "".join(out))
                return Piece(start + offset, k + 1 + offset, source, tuple(strings))
        out.append(c)
        k += 1
    return None


def _string(text: str, k: int) -> tuple[int, str]:
    """The string literal opening at `k` (single, double or triple quoted): where it ends and its value."""
    quote = text[k] * 3 if text.startswith(text[k] * 3, k) else text[k]
    i = k + len(quote)
    value: list[str] = []
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            value.append(_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
            i += 2
            continue
        if text.startswith(quote, i) and (len(quote) == 3 or _AFTER_VALUE.match(text, i + 1)):
            return i + len(quote), "".join(value)
        value.append(c)
        i += 1
    return len(text), "".join(value)
