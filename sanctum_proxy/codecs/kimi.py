"""Kimi K2 calls, special tokens around `functions.NAME:INDEX` and JSON arguments:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The section markers may be missing, or written in the singular (`<|tool_call_section_begin|>`); the
`functions.` prefix and the index are dropped from the name. Arguments go on as written. A bare counter id
(`0`) names the one offered tool; among several, the call carries BARE_COUNTER and the judge picks by its keys.
"""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import BARE_COUNTER, Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import arguments_text
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "kimi"
_SECTION = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
_BEGIN = "<|tool_call_begin|>"
_END = "<|tool_call_end|>"
# Kimi K3 closes its message with this marker before the end-of-message token: markup, never content.
_K3_CLOSE = "<|close|>message<|sep|>"
STARTS: tuple[str, ...] = (*_SECTION, _BEGIN, _K3_CLOSE)
_ID = re.compile(r"\s*(?:functions\.)?([^\s:<]{1,256})(?::\d+)?\s*\Z")
_TRAIL = re.compile(r"\s*<\|tool_calls?_section_end\|>")
_HEAD_END = re.compile(r"<\|tool_call_argument_begin\|>|<\|tool_call_begin\|>")
_EMPTY = re.compile(r"<\|tool_calls?_section_begin\|>\s*<\|tool_calls?_section_end\|>")
_BODY_END = re.compile(r"<\|tool_call_end\|>|<\|tool_call_begin\|>|<\|tool_calls?_section_end\|>")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        begin = text.find(_BEGIN, pos)
        if begin < 0 or json_blocks.full(out):
            break
        start = _section_start(text, pos, begin)
        head = _HEAD_END.search(text, begin + len(_BEGIN))
        if head is None or head.group() == _BEGIN:  # no arguments before the next call
            pos = begin + len(_BEGIN)
            continue
        head_end = head.start()
        ident = _ID.match(text[begin + len(_BEGIN) : head_end])
        body = head.end()
        close = _BODY_END.search(text, body)
        stop = close.start() if close else len(text)
        end = close.end() if close and close.group() == _END else stop
        trail = _TRAIL.match(text, end)
        if trail and text.find(_BEGIN, end, trail.end()) < 0:
            end = trail.end()
        name = ident.group(1) if ident else text[begin + len(_BEGIN) : head_end].strip()
        marks: tuple[str, ...] = ()
        if name.isdigit() and len(tool_names) == 1:  # a bare counter id (`0`): the one offered tool's call
            (name,) = tool_names
        elif name.isdigit():
            marks = (BARE_COUNTER,)
        args = text[body:stop].strip()
        out.append(Found(start, end, (Candidate(name, args or None, NAME, text[start:end], repairs=marks),)))
        pos = end
    if "section_end" in text:
        out += _empty_sections(text, out)
    if _K3_CLOSE in text:
        out += [Found(m.start(), m.end(), ()) for m in re.finditer(re.escape(_K3_CLOSE), text)
                if not any(f.start <= m.start() < f.end for f in out)]
    return sorted(out, key=lambda f: f.start)


def _section_start(text: str, pos: int, begin: int) -> int:
    """The call begins at a section marker before it, if there is one: what lies between (blanks, or noise the
    model wrote there) is inside the section, not content."""
    for marker in _SECTION:
        at = text.rfind(marker, pos, begin)
        if at >= 0 and "<|" not in text[at + len(marker) : begin]:
            return at
    return begin


def _empty_sections(text: str, taken: list[Found]) -> list[Found]:
    """Sections that hold no call (`<|tool_calls_section_begin|><|tool_calls_section_end|>`): markup only."""
    return [Found(m.start(), m.end(), ()) for m in _EMPTY.finditer(text)
            if not any(f.start <= m.start() < f.end for f in taken)]


def render_call(name: str, arguments: JSONValue) -> str:
    return (f"{_SECTION[0]}{_BEGIN}functions.{name}:0<|tool_call_argument_begin|>"
            f"{arguments_text(arguments)}{_END}<|tool_calls_section_end|>")


def render_result(name: str, call_id: str, text: str) -> str:
    return f"## Return of {call_id or f'functions.{name}:0'}\n{text}"


CODEC = register(Codec(NAME, find, STARTS, rank=40))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has(_SECTION[0], _BEGIN),
                       detect_rank=20))
