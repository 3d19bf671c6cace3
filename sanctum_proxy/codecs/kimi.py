"""Kimi K2 calls, special tokens around `functions.NAME:INDEX` and JSON arguments:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The section markers may be missing, or written in the singular (`<|tool_call_section_begin|>`); the
`functions.` prefix and the index are dropped from the name. Arguments go on as written.
"""

from __future__ import annotations

import re

from sanctum_proxy.calls import Candidate, Found
from sanctum_proxy.codecs import json_blocks

NAME = "kimi"
_SECTION = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
_SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
_BEGIN = "<|tool_call_begin|>"
_ARGS = "<|tool_call_argument_begin|>"
_END = "<|tool_call_end|>"
STARTS: tuple[str, ...] = (*_SECTION, _BEGIN)
_ID = re.compile(r"\s*(?:functions\.)?([^\s:<]{1,256})(?::\d+)?\s*\Z")
_TRAIL = re.compile(r"\s*<\|tool_calls?_section_end\|>")


def find(text: str, spell_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        begin = text.find(_BEGIN, pos)
        if begin < 0 or json_blocks.full(out):
            break
        start = _section_start(text, pos, begin)
        head_end = text.find(_ARGS, begin)
        nxt = text.find(_BEGIN, begin + len(_BEGIN))
        if head_end < 0 or 0 <= nxt < head_end:
            pos = begin + len(_BEGIN)
            continue
        ident = _ID.match(text[begin + len(_BEGIN) : head_end])
        body = head_end + len(_ARGS)
        close = text.find(_END, body)
        stops = [i for t in (_BEGIN, *_SECTION_END) if (i := text.find(t, body)) >= 0]
        stop = min([i for i in (close, *stops) if i >= 0], default=len(text))
        end = stop + len(_END) if stop == close else stop
        trail = _TRAIL.match(text, end)
        if trail and text.find(_BEGIN, end, trail.end()) < 0:
            end = trail.end()
        name = ident.group(1) if ident else text[begin + len(_BEGIN) : head_end].strip()
        args = text[body:stop].strip()
        out.append(Found(start, end, (Candidate(name, args or None, NAME, text[start:end]),)))
        pos = end
    return out


def _section_start(text: str, pos: int, begin: int) -> int:
    """The call begins at a section marker right before it, if there is one."""
    for marker in _SECTION:
        at = text.rfind(marker, pos, begin)
        if at >= 0 and not text[at + len(marker) : begin].strip():
            return at
    return begin

