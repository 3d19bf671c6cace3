"""Where a model's reasoning is in its text: generic reasoning markup, defined once. Pure.

Reasoning is never read for calls: thinking "a call would look like {...}" makes no call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sanctum_proxy.core.accumulated import Accumulated


@dataclass(frozen=True)
class Marker:
    opener: str
    closer: str
    orphan_closer: bool  # closes reasoning the prompt opened


# Harmony, Command-R and Seed-OSS blocks belong to their codecs.
MARKERS: tuple[Marker, ...] = (
    Marker("<think>", "</think>", True),
    Marker("[THINK]", "[/THINK]", True),
    Marker("<|channel>thought", "<channel|>", True),
)
# Markers no client folds (every peer takes them out): their blocks leave content even under "keep".
UNRENDERED: tuple[Marker, ...] = MARKERS[1:]
OPENERS: tuple[str, ...] = tuple(m.opener for m in MARKERS)
ORPHAN_CLOSERS: tuple[str, ...] = tuple(m.closer for m in MARKERS if m.orphan_closer)
CLOSER_OF: dict[str, str] = {m.opener: m.closer for m in MARKERS}
FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")
LONGEST: int = max(len(s) for m in MARKERS for s in (m.opener, m.closer))
OPENER = re.compile("|".join(re.escape(o) for o in OPENERS))


def spans(text: str, skip: Callable[[int], bool] | None = None) -> list[tuple[int, int]]:
    """(start, end) of each span; `skip`: openers that are call text."""
    out: list[tuple[int, int]] = []
    pos = 0
    orphan = first_orphan_closer(text)
    if orphan is not None and not (skip is not None and skip(orphan - 1)):  # (orphan - 1: in the closer)
        out.append((0, orphan))
        pos = orphan
    while True:
        match = OPENER.search(text, pos)
        if match is None:
            return out
        if skip is not None and skip(match.start()):
            pos = match.end()
            continue
        closer = CLOSER_OF[match.group()]
        at = text.find(closer, match.end())
        end = len(text) if at < 0 else at + len(closer)
        out.append((match.start(), end))
        pos = end


def first_orphan_closer(text: str) -> int | None:
    """A closer before any opener: reasoning the prompt opened."""
    first_opener = OPENER.search(text)
    limit = first_opener.start() if first_opener else len(text)
    ends = [at + len(c) for c in ORPHAN_CLOSERS if 0 <= (at := text.find(c, 0, limit))]
    return min(ends) if ends else None


def outside(text: str, skip: Callable[[int], bool] | None = None) -> list[tuple[int, int]]:
    """The non-empty (start, end) pieces that are not reasoning."""
    out: list[tuple[int, int]] = []
    pos = 0
    for start, end in spans(text, skip):
        if start > pos:
            out.append((pos, start))
        pos = end
    if pos < len(text):
        out.append((pos, len(text)))
    return out


def partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Where a suffix could grow into a marker."""
    for at in range(max(0, len(text) - LONGEST), len(text)):
        if text[at] not in "<[":
            continue
        tail = text[at:]
        if any(m.startswith(tail) for m in markers):
            return at
    return len(text)


class Splitter:
    """Reasoning blocks moved to `reasoning_content`, as llama.cpp's `--reasoning-format deepseek` does: all of
    `markers` with `reasoning_format = "split"`, `UNRENDERED` ones always."""

    def __init__(self, markers: tuple[Marker, ...] = MARKERS) -> None:
        self._openers = tuple(m.opener for m in markers)
        self._opener = re.compile("|".join(re.escape(o) for o in self._openers))
        self._closer = ""
        self._pending = ""
        self._started = False
        self._space = Accumulated()  # trimmed before the closer
        self._after = False
        self._given = False  # set the next block off by a blank line
        self._fresh = False

    def feed(self, text: str) -> list[tuple[str, str]]:
        """(field, text) pieces in order."""
        out: list[tuple[str, str]] = []
        text, self._pending = self._pending + text, ""
        pos = 0
        while pos < len(text):
            if self._closer:
                at = text.find(self._closer, pos)
                if at < 0:
                    cut = pos + partial_marker(text[pos:], (self._closer,))
                    self._reason(text[pos:cut], out)
                    self._pending = text[cut:]
                    return out
                self._reason(text[pos:at], out)
                pos, self._closer, self._after = at + len(self._closer), "", True
                self._space.take()
                continue
            match = self._opener.search(text, pos)
            end = match.start() if match else pos + partial_marker(text[pos:], self._openers)
            self._content(text[pos:end], out)
            if match is None:
                self._pending = text[end:]
                return out
            pos, self._closer, self._started, self._fresh = match.end(), CLOSER_OF[match.group()], False, True
        return out

    def flush(self) -> list[tuple[str, str]]:
        """A partial marker held back is text after all."""
        out: list[tuple[str, str]] = []
        pending, self._pending = self._pending, ""
        if self._closer:
            self._reason(pending, out)
        else:
            self._content(pending, out)
        return out

    def _reason(self, text: str, out: list[tuple[str, str]]) -> None:
        if not self._started:
            text = text.lstrip()
            self._started = bool(text)
        body = text.rstrip()
        if body:
            lead = self._space.take()
            out.append(("reasoning_content", ("\n\n" if self._fresh and self._given else lead) + body))
            self._given, self._fresh = True, False
        self._space += text[len(body):]

    def _content(self, text: str, out: list[tuple[str, str]]) -> None:
        if self._after:
            text = text.lstrip()
            self._after = not text
        if text:
            out.append(("content", text))


def split(text: str, markers: tuple[Marker, ...] = MARKERS) -> tuple[str, str]:
    """(content, reasoning), as `Splitter` gives them."""
    splitter = Splitter(markers)
    pieces = splitter.feed(text) + splitter.flush()
    return ("".join(t for f, t in pieces if f == "content"), "".join(t for f, t in pieces if f != "content"))
