"""Where a model's reasoning is in its text: the one place reasoning markup is defined. Pure: no I/O.

Reasoning is never read for calls (a model thinking "a call would look like {...}" made no call), and it
is kept whole. The markup of the reasoning models people run locally:

    <think> ... </think>                                  Qwen3, QwQ, DeepSeek-R1 and its distills
    <|channel|>analysis<|message|> ... <|end|>            gpt-oss (harmony), the analysis channel
    [THINK] ... [/THINK]                                  Magistral
    <seed:think> ... </seed:think>                        Seed-OSS
    <|START_THINKING|> ... <|END_THINKING|>               Command-R / Command-A

A span runs from its opener to the end of its closer. An opener without a closer (the answer was cut, or
is still arriving) runs to the end of the text. A closer with no opener before it, first in the text, closes
reasoning that began at the start: templates that open `<think>` in the prompt (DeepSeek-R1, QwQ) leave
the model's output with only the closer. (Harmony's `<|end|>` ends any message, so it never closes a
reasoning that has no opener.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass


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
)
OPENERS: tuple[str, ...] = tuple(m.opener for m in MARKERS)
ORPHAN_CLOSERS: tuple[str, ...] = tuple(m.closer for m in MARKERS if m.orphan_closer)
CLOSER_OF: dict[str, str] = {m.opener: m.closer for m in MARKERS}
# The message fields reasoning comes in, apart from content: llama.cpp and vLLM's `reasoning_content`, Ollama's
# (and newer vLLM's) `reasoning`. Never read for calls; forwarded as they came.
FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")
LONGEST: int = max(len(s) for m in MARKERS for s in (m.opener, m.closer))
OPENER = re.compile("|".join(re.escape(o) for o in OPENERS))


def spans(text: str) -> list[tuple[int, int]]:
    """The reasoning spans of `text` as (start, end) pairs, in order, markers included."""
    out: list[tuple[int, int]] = []
    pos = 0
    orphan = first_orphan_closer(text)
    if orphan is not None:
        out.append((0, orphan))
        pos = orphan
    while True:
        match = OPENER.search(text, pos)
        if match is None:
            return out
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


def outside(text: str) -> list[tuple[int, int]]:
    """The (start, end) pieces of `text` that are not reasoning, in order (empty pieces left out)."""
    out: list[tuple[int, int]] = []
    pos = 0
    for start, end in spans(text):
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
