"""Every call format by name, and the one function that finds calls in text with all the codecs."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import (  # noqa: F401  (imported to register)
    command_r,
    deepseek,
    dsml,
    functionary,
    functiongemma,
    gemma4,
    glm,
    harmony,
    hermes,
    job_lines,
    json_blocks,
    json_tags,
    kimi,
    llama,
    minicpm,
    minimax,
    minimax_m3,
    mistral,
    pythonic,
    qwen_xml,
    seed,
    step3,
)
from sanctum_proxy.codecs.base import MAX_CANDIDATES, RESULT_OPENER, Codec, Format, blank, codecs, formats
from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.json_scan import forget_scans
from sanctum_proxy.core.shapes import JSONValue

# Reasoning-claiming codecs first, so no call inside reasoning is read; GLM before Hermes (both: <tool_call>).
CODECS: tuple[Codec, ...] = codecs()
FORMATS: dict[str, Format] = formats()
# Sources whose parameters are the text written (Codec.text_values).
TEXT_VALUED: frozenset[str] = frozenset(s for codec in CODECS if codec.text_values
                                        for s in (codec.name, *codec.sources))
# `prompt_format` values besides "auto", and the default.
FALLBACK = hermes.NAME
FORMAT_NAMES: tuple[str, ...] = tuple(sorted((name for name, f in FORMATS.items() if f.selectable),
                                             key=lambda name: (name != FALLBACK, name)))


def format_of(fmt: str) -> Format:
    """The format named `fmt`; Hermes for an unknown name."""
    return FORMATS.get(fmt) or FORMATS[FALLBACK]


def render_call(fmt: str, name: str, arguments: JSONValue) -> str:
    """One call as text in format `fmt`; broken JSON stays as written."""
    return format_of(fmt).render_call(name, arguments)


def stream_starts() -> tuple[str, ...]:
    """The delimiters the streaming hold-back holds at, the echoed tool-result tag among them."""
    generic = {g for codec in CODECS for g in codec.generic}
    return tuple(dict.fromkeys([s for codec in CODECS for s in codec.starts if s not in generic]
                               + [h for c in CODECS for h in c.holds] + [RESULT_OPENER]))


def stream_lead() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The lead patterns of the format that opens bare (Functionary v3.2)."""
    (lead,) = [c.lead for c in CODECS if c.lead is not None]
    partial, text, call = (re.compile(p) for p in lead)
    return partial, text, call


def stream_shapes() -> tuple[re.Pattern[str], re.Pattern[str], frozenset[str]]:
    """Generic openers in call shape, text ends that may grow into one, and their first characters."""
    shaped = [c for c in CODECS if c.shape]
    return (re.compile("|".join(c.shape for c in shaped)), re.compile("|".join(c.partial_shape for c in shaped)),
            frozenset(g[0] for c in CODECS for g in c.generic))


def find_calls(text: str, tool_names: frozenset[str]) -> list[Found]:
    """Every call in `text`, in order, without overlapping spans; at most MAX_CANDIDATES calls."""
    try:
        return _capped(_find(text, tool_names, CODECS, settle=True))
    finally:
        forget_scans()  # lenient_json's memory of this text


def _find(text: str, tool_names: frozenset[str], readers: tuple[Codec, ...], *, settle: bool) -> list[Found]:
    """The codecs' reading; with `settle`, unsure claims are checked against later codecs' calls."""
    accepted: list[Found] = []
    for i, codec in enumerate(readers):
        if not any(s in text for s in codec.starts) and not (codec.opens and codec.opens(text)):
            continue
        new: list[Found] = []
        for found in codec.find(text, tool_names):  # a codec's own finds may overlap too
            if not _overlaps(found, accepted + new):
                new.append(found)
        if not settle:
            new = [f for f in new if f.candidates]
        if any(_unsure(f) for f in new):  # unsettled too: a nameless opener inside a later call is its text
            new = _calls_win(new, _find(text, tool_names, readers[i + 1 :], settle=False))
        if new:
            accepted.extend(new)
            text = blank(text, new)
    accepted.sort(key=lambda f: f.start)
    return accepted


def _calls_win(claims: list[Found], later: list[Found]) -> list[Found]:
    """Unsure claims opening inside a later codec's call are that call's text, and are left out."""
    calls = [f for f in later if f.candidates]
    return [f for f in claims if not (_unsure(f) and any(c.start < f.start < c.end for c in calls))]


def _unsure(found: Found) -> bool:
    """A claim that may be another call's text: no call, or an opener with no tool name after it."""
    return not found.candidates or any(not c.name for c in found.candidates)


def _overlaps(found: Found, accepted: list[Found]) -> bool:
    return any(found.start < a.end and a.start < found.end for a in accepted)


def _capped(found: list[Found]) -> list[Found]:
    out: list[Found] = []
    total = 0
    for f in found:
        if total + len(f.candidates) > MAX_CANDIDATES:
            break
        out.append(f)
        total += len(f.candidates)
    return out
