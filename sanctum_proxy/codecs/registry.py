"""Every call format by name, and the one function that finds calls in text with all the codecs.

Importing this module imports every codec module, each of which registers its Codec and Formats
(codecs/base.py says what they hold). `find_calls` runs the codecs in their reading order; spans a codec
claims are blanked before the next codec looks, so a Hermes call is never found again as bare JSON. A Found
without candidates is markup or reasoning that is not content (a harmony channel header, a thinking block).
"""

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
from sanctum_proxy.core.lenient_json import forget_scans
from sanctum_proxy.core.shapes import JSONValue

# Codecs that claim reasoning blocks (harmony's analysis, Command-R's thinking, Seed's think) read first, so
# no later codec reads calls written inside reasoning; GLM before Hermes (both open with <tool_call>).
CODECS: tuple[Codec, ...] = codecs()
FORMATS: dict[str, Format] = formats()
# The `Candidate.source` of codecs whose parameters are the text written (Codec.text_values).
TEXT_VALUED: frozenset[str] = frozenset(s for codec in CODECS if codec.text_values
                                        for s in (codec.name, *codec.sources))
# The values `prompt_format` may take besides "auto", and the format used when none is known.
FALLBACK = hermes.NAME
FORMAT_NAMES: tuple[str, ...] = tuple(sorted((name for name, f in FORMATS.items() if f.selectable),
                                             key=lambda name: (name != FALLBACK, name)))


def format_of(fmt: str) -> Format:
    """The format named `fmt`; Hermes for an unknown name."""
    return FORMATS.get(fmt) or FORMATS[FALLBACK]


def render_call(fmt: str, name: str, arguments: JSONValue) -> str:
    """One call as text in format `fmt` (arguments: a mapping, or JSON text; broken JSON stays as written)."""
    return format_of(fmt).render_call(name, arguments)


def stream_starts() -> tuple[str, ...]:
    """The delimiters the streaming hold-back holds at: every codec's own, less the generic ones, and the
    tool-result tag the prompts wrap results in (a model that echoes it: repair/prompted.without_result_tags)."""
    generic = {g for codec in CODECS for g in codec.generic}
    return tuple(dict.fromkeys([s for codec in CODECS for s in codec.starts if s not in generic]
                               + [h for c in CODECS for h in c.holds] + [RESULT_OPENER]))


def stream_lead() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The lead patterns (Codec.lead) of the format that opens bare (Functionary v3.2), for `Assembler(lead=True)`."""
    (lead,) = [c.lead for c in CODECS if c.lead is not None]
    partial, text, call = (re.compile(p) for p in lead)
    return partial, text, call


def stream_shapes() -> tuple[re.Pattern[str], re.Pattern[str], frozenset[str]]:
    """The generic openers in call shape (held while streaming), the ends of text that may grow into one, and
    the generic openers' first characters."""
    shaped = [c for c in CODECS if c.shape]
    return (re.compile("|".join(c.shape for c in shaped)), re.compile("|".join(c.partial_shape for c in shaped)),
            frozenset(g[0] for c in CODECS for g in c.generic))


def find_calls(text: str, tool_names: frozenset[str]) -> list[Found]:
    """Every call in `text`, in order, without overlapping spans; at most MAX_CANDIDATES calls."""
    try:
        return _capped(_find(text, tool_names, CODECS, settle=True))
    finally:
        forget_scans()  # the scans' memory of this text (lenient_json.value_end) goes with it


def _find(text: str, tool_names: frozenset[str], readers: tuple[Codec, ...], *, settle: bool) -> list[Found]:
    """The codecs' reading. An unsure claim is checked against the calls the later codecs read; without
    `settle`, only calls are read (a claim without calls is neither blanked nor checked)."""
    accepted: list[Found] = []
    for i, codec in enumerate(readers):
        if not any(s in text for s in codec.starts) and not (codec.opens and codec.opens(text)):
            continue
        new: list[Found] = []
        for found in codec.find(text, tool_names):  # a codec's own finds may overlap too (a Seed-OSS think
            if not _overlaps(found, accepted + new):  # block opened inside an unclosed call)
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
    """An unsure claim (a reasoning block, a channel header, another format's call opener) that opens inside a
    call a later codec reads, is that call's text ('{"q": "<seed:think>"}', '{"q": "<|START_ACTION|>"}'), not a claim:
    it is left out. A call written inside reasoning is the other way round: the claim opens first and stands."""
    calls = [f for f in later if f.candidates]
    return [f for f in claims if not (_unsure(f) and any(c.start < f.start < c.end for c in calls))]


def _unsure(found: Found) -> bool:
    """A claim that may be another call's text: no call (reasoning, a header), or a call opener with no tool
    name after it (Command-R's `<|START_ACTION|>` inside a Hermes argument reads as a nameless call). A named
    call stands without the later codecs' reading (that reading costs about as much as the claim's own)."""
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
