"""The call formats, most specific first, and the one function that finds calls in text with all of them.

Each codec module has NAME, STARTS (the literal delimiters that may open a call in streamed text, for the
streaming hold-back) and `find(text, spell_names) -> list[Found]`; one whose calls may open the text
without a delimiter (Functionary v3.2) also has `opens(text) -> bool`. Spans a codec claims are blanked
before the next codec looks, so a Hermes call is never found again as bare JSON. A Found without
candidates is markup or reasoning that is not content (a harmony channel header, a thinking block).
"""

from __future__ import annotations

from typing import Protocol

from sanctum_proxy.calls import Found
from sanctum_proxy.codecs import (
    command_r,
    deepseek,
    functionary,
    glm,
    harmony,
    hermes,
    json_blocks,
    kimi,
    llama,
    mistral,
    pythonic,
    qwen_xml,
    seed,
)

MAX_CANDIDATES = 128


class Codec(Protocol):
    NAME: str
    STARTS: tuple[str, ...]

    def find(self, text: str, spell_names: frozenset[str]) -> list[Found]: ...


# Codecs that claim reasoning blocks (harmony's analysis, Command-R's thinking, Seed's think) run first, so
# no later codec reads calls written inside reasoning; GLM runs before Hermes (both open with <tool_call>).
CODECS: tuple[Codec, ...] = (
    harmony, command_r, seed, kimi, deepseek, glm, qwen_xml, hermes, mistral, llama, functionary, pythonic,
    json_blocks,
)


def all_starts() -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for codec in CODECS for s in codec.STARTS))


def find_calls(text: str, spell_names: frozenset[str]) -> list[Found]:
    """Every call in `text`, in order, without overlapping spans; at most MAX_CANDIDATES calls."""
    accepted: list[Found] = []
    for codec in CODECS:
        opens = getattr(codec, "opens", None)
        if not any(s in text for s in codec.STARTS) and not (opens and opens(text)):
            continue
        new = [f for f in codec.find(text, spell_names) if not _overlaps(f, accepted)]
        if new:
            accepted.extend(new)
            text = _blank(text, new)
    accepted.sort(key=lambda f: f.start)
    return _capped(accepted)


def _overlaps(found: Found, accepted: list[Found]) -> bool:
    return any(found.start < a.end and a.start < found.end for a in accepted)


def _blank(text: str, spans: list[Found]) -> str:
    pieces: list[str] = []
    pos = 0
    for f in sorted(spans, key=lambda f: f.start):
        pieces.append(text[pos : f.start])
        pieces.append(" " * (f.end - f.start))
        pos = f.end
    pieces.append(text[pos:])
    return "".join(pieces)


def _capped(found: list[Found]) -> list[Found]:
    out: list[Found] = []
    total = 0
    for f in found:
        if total + len(f.candidates) > MAX_CANDIDATES:
            break
        out.append(f)
        total += len(f.candidates)
    return out
