"""Where one JSON value in a model's text ends, found in one linear scan of its brackets and quotes."""

from __future__ import annotations

import re
import threading

from sanctum_proxy.core.decoded_json import CLOSER, MAX_DEPTH

SCAN_TOKENS_PER_CHAR = 0.5  # value_end's budget on one text
SCAN_TOKENS_BASE = 100_000
_STRUCTURE = re.compile(r"""[{}\[\]"']""")
_STRUCTURE_PARENS = re.compile(r"""[{}\[\]()"']""")


def value_end(text: str, start: int, *, parens: bool = False) -> int | None:
    """Index just past the bracket closing the one at `start`, or None.

    All calls on one text share a scan budget so many openers stay linear; once spent, no more values are read.
    """
    quotes = _quotes_of(text)
    stack: list[str] = []
    search = (_STRUCTURE_PARENS if parens else _STRUCTURE).search
    pos = start
    while (m := search(text, pos)) is not None:
        quotes.tokens_left -= 1
        if quotes.tokens_left < 0:
            return None  # scan budget spent
        tok = m.group()
        if tok in "\"'":
            close = quotes.close(m.start(), tok)
            if close is None:
                return None  # a quote that never closes
            pos = close + 1
            continue
        pos = m.end()
        if tok in "{[(":
            if len(stack) >= MAX_DEPTH:
                return None
            stack.append(tok)
        elif not stack or CLOSER[stack.pop()] != tok:
            return None
        if not stack:
            return pos
    return None


_QUOTE = re.compile(r"""["']""")


class _Quotes:
    """Where each string opened at a quote closes, found once per text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._closes: dict[int, int | None] = {}
        self._unclosed_from = {'"': len(text), "'": len(text)}
        self.tokens_left = int(len(text) * SCAN_TOKENS_PER_CHAR) + SCAN_TOKENS_BASE

    def close(self, at: int, quote: str) -> int | None:
        if at in self._closes:
            return self._closes[at]
        if at >= self._unclosed_from[quote]:
            return None
        text, pos, found = self.text, at + 1, None
        while (end := text.find(quote, pos)) >= 0 and self.tokens_left > 0:
            self.tokens_left -= 1  # an escaped quote costs budget too
            run = end
            while run > at + 1 and text[run - 1] == "\\":
                run -= 1
            if (end - run) % 2 == 0:
                found = end
                break
            pos = end + 1
        if found is None and end < 0:
            self._unclosed_from[quote] = min(self._unclosed_from[quote], at)
        self._closes[at] = found
        return found


_LAST = threading.local()


def forget_scans() -> None:
    """Let go of the text the last scans kept (maybe megabytes)."""
    _LAST.quotes = None


def _quotes_of(text: str) -> _Quotes:
    """The text's _Quotes, kept for the next call on the same text."""
    quotes: _Quotes | None = getattr(_LAST, "quotes", None)
    if quotes is None or quotes.text is not text:
        quotes = _LAST.quotes = _Quotes(text)
    return quotes
