"""Where a model's reasoning is in its text: the one place reasoning markup is defined. Pure: no I/O.

Reasoning is never read for calls (a model thinking "a call would look like {...}" made no call), and it
is kept whole. The markup of the reasoning models people run locally:

    <think> ... </think>                                  Qwen3, QwQ, DeepSeek-R1 and its distills
    <|channel|>analysis<|message|> ... <|end|>            gpt-oss (harmony), the analysis channel
    [THINK] ... [/THINK]                                  Magistral
    <seed:think> ... </seed:think>                        Seed-OSS
    <|START_THINKING|> ... <|END_THINKING|>               Command-R / Command-A
    <|channel>thought ... <channel|>                      Gemma 4 (its chat template's thought channel)

A span runs from its opener to the end of its closer. An opener without a closer (the answer was cut, or
is still arriving) runs to the end of the text. A closer with no opener before it, first in the text, closes
reasoning that began at the start: templates that open `<think>` in the prompt (DeepSeek-R1, QwQ) leave
the model's output with only the closer. (Harmony's `<|end|>` ends any message, so it never closes a
reasoning that has no opener.)
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
    orphan_closer: bool  # a closer alone closes reasoning that began at the start of the text


# The reasoning blocks of a whole call format (harmony's analysis channel, Command-R's <|START_THINKING|>,
# Seed-OSS's <seed:think>) belong to that format's codec, which reads them as reasoning, never as calls, and
# moves them into reasoning_content with the calls (codecs/harmony.py, command_r.py, seed.py).
MARKERS: tuple[Marker, ...] = (
    Marker("<think>", "</think>", True),
    Marker("[THINK]", "[/THINK]", True),
    # Gemma 4: `<|channel>thought\n...<channel|>` (google/gemma-4 chat_template.jinja; llama.cpp's reasoning
    # budget watches the same two strings). A prompt that opens the channel leaves the output the closer alone.
    Marker("<|channel>thought", "<channel|>", True),
)
# Markers no client renders as reasoning (vLLM, llama.cpp and Ollama all take them out): under the default
# `reasoning_format = "keep"` their blocks still leave content, so a call they quote never shows as one there.
# Only `<think>` stays in content, as clients fold it.
UNRENDERED: tuple[Marker, ...] = MARKERS[1:]
OPENERS: tuple[str, ...] = tuple(m.opener for m in MARKERS)
ORPHAN_CLOSERS: tuple[str, ...] = tuple(m.closer for m in MARKERS if m.orphan_closer)
CLOSER_OF: dict[str, str] = {m.opener: m.closer for m in MARKERS}
# The message fields reasoning comes in, apart from content: llama.cpp and vLLM's `reasoning_content`, Ollama's
# (and newer vLLM's) `reasoning`. Never read for calls; forwarded as they came.
FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")
LONGEST: int = max(len(s) for m in MARKERS for s in (m.opener, m.closer))
OPENER = re.compile("|".join(re.escape(o) for o in OPENERS))


def spans(text: str, skip: Callable[[int], bool] | None = None) -> list[tuple[int, int]]:
    """The reasoning spans of `text` as (start, end) pairs, in order, markers included. `skip`: openers at
    these positions are not markup (a marker written inside a call's arguments is the call's text)."""
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
    """The end of a closer that comes before any opener (reasoning begun in the prompt), else None."""
    first_opener = OPENER.search(text)
    limit = first_opener.start() if first_opener else len(text)
    ends = [at + len(c) for c in ORPHAN_CLOSERS if 0 <= (at := text.find(c, 0, limit))]
    return min(ends) if ends else None


def outside(text: str, skip: Callable[[int], bool] | None = None) -> list[tuple[int, int]]:
    """The (start, end) pieces of `text` that are not reasoning, in order (empty pieces left out)."""
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
    """Where a suffix of `text` could still grow into one of `markers` (len(text) when none could)."""
    for at in range(max(0, len(text) - LONGEST), len(text)):
        if text[at] not in "<[":
            continue
        tail = text[at:]
        if any(m.startswith(tail) for m in markers):
            return at
    return len(text)


class Splitter:
    """Reasoning markup in content moved out of it, the way llama.cpp's `--reasoning-format deepseek` does (setting
    `reasoning_format = "split"`; `UNRENDERED` blocks always): the text of each `<think>` / `[THINK]` block goes to
    `reasoning_content` (markers dropped, whitespace around it trimmed), the rest stays content (the whitespace
    after a block dropped). Fed content piece by piece (a stream) or whole, it gives the same text: a partial marker
    at the end of a piece waits for the next. Reasoning begun in the prompt (a lone closer, no opener) cannot be
    told apart while it streams: it stays content, markers and all, streamed or not."""

    def __init__(self, markers: tuple[Marker, ...] = MARKERS) -> None:
        self._openers = tuple(m.opener for m in markers)
        self._opener = re.compile("|".join(re.escape(o) for o in self._openers))
        self._closer = ""  # inside a block: the closer that ends it
        self._pending = ""  # a possible partial marker, not yet given out
        self._started = False  # inside a block: text other than whitespace seen
        self._space = Accumulated()  # inside a block: whitespace waiting for more reasoning (trimmed before the closer)
        self._after = False  # a block just closed: the content's leading whitespace is dropped
        self._given = False  # reasoning was given out: the next block's is set off by a blank line
        self._fresh = False  # a block opened and none of its reasoning given out yet

    def feed(self, text: str) -> list[tuple[str, str]]:
        """(field, text) pieces, field "content" or "reasoning_content", in order."""
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
        """The end of the content: a partial marker held back is text after all."""
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
    """(content, reasoning) of a whole text, as `Splitter` gives them."""
    splitter = Splitter(markers)
    pieces = splitter.feed(text) + splitter.flush()
    return ("".join(t for f, t in pieces if f == "content"), "".join(t for f, t in pieces if f != "content"))
