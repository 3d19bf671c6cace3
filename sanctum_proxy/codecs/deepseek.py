"""DeepSeek's tool-call tokens left in content, in both generations' shapes."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import MALFORMED, Codec, Format, register, register_format
from sanctum_proxy.codecs.writing import arguments_text
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "deepseek"
_SECTIONS = ("<｜tool▁calls▁begin｜>", "<｜tool_calls_begin｜>", "<｜tool calls begin｜>", "<｜tool\\_calls\\_begin｜>",
             "<｜tool▁calls｜>")
_BEGIN = "<｜tool▁call▁begin｜>"
_END = "<｜tool▁call▁end｜>"
STARTS: tuple[str, ...] = (*_SECTIONS, _BEGIN)
_OPEN = re.compile("|".join(re.escape(t) for t in (_BEGIN, *_SECTIONS)))
_TRAIL = re.compile("\\s*<｜tool▁calls▁end｜>")
_V3_NAME = re.compile(r"([^\n<]{1,256})\n?")
_HEAD_END = re.compile("<｜tool▁sep｜>|<｜tool▁call▁begin｜>")
_BODY_END = re.compile("<｜tool▁call▁end｜>|<｜tool▁call▁begin｜>|<｜tool▁calls▁end｜>")
_WS = re.compile(r"\s*")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _OPEN.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        head_at = m.end()
        if m.group() != _BEGIN:  # a section opener: the call opener after it may be left out
            ws = _WS.match(text, head_at)
            head_at = ws.end() if ws else head_at
            if text.startswith(_BEGIN, head_at):
                head_at += len(_BEGIN)
        sep = _HEAD_END.search(text, head_at)
        head = text[head_at : sep.start()].strip() if sep else ""
        if sep is None or sep.group() == _BEGIN or len(head) > 256 or "\n" in head or "<" in head:
            pos = head_at if head_at > m.start() else m.end()
            continue
        body = sep.end()
        close = _BODY_END.search(text, body)
        stop = close.start() if close else len(text)
        end = close.end() if close and close.group() == _END else stop
        if head in ("", "function"):
            v3 = _V3_NAME.match(text, body, stop)
            name = v3.group(1).strip() if v3 else ""
            args = text[v3.end() if v3 else body : stop].strip()
        else:
            name, args = head, text[body:stop].strip()
        trail = _TRAIL.match(text, end)
        if trail:
            end = trail.end()
        out.append(Found(m.start(), end, (Candidate(name, args or None, NAME, text[m.start() : end]),)))
        pos = end
    return out


def render_call(name: str, arguments: JSONValue) -> str:
    """V3 / R1: `function`, the name, the arguments in a ```json fence."""
    return (f"{_SECTIONS[0]}{_BEGIN}function<｜tool▁sep｜>{name}\n```json\n"
            f"{arguments_text(arguments)}\n```{_END}<｜tool▁calls▁end｜>")


def render_call_v31(name: str, arguments: JSONValue) -> str:
    """V3.1+: the name, then the arguments bare."""
    return f"{_SECTIONS[0]}{_BEGIN}{name}<｜tool▁sep｜>{arguments_text(arguments)}{_END}<｜tool▁calls▁end｜>"


def render_result(name: str, call_id: str, text: str) -> str:
    return f"<｜tool▁output▁begin｜>{text}<｜tool▁output▁end｜>"


CODEC = register(Codec(NAME, find, STARTS, rank=50))
# A template with the separator is V3 / R1's when it fences the arguments, else V3.1+'s.
# Its arguments go in a fence, read as JSON text (V3.1's calls are read by the same codec, and asked for alike).
_AS_ASKED = frozenset({"code_fence", MALFORMED})
register_format(Format(NAME, NAME, render_call, render_result, detect_rank=60, as_asked=_AS_ASKED,
                       detect=lambda t: "<｜tool▁sep｜>" in t and "```json" in t))
register_format(Format("deepseek_v31", NAME, render_call_v31, render_result, detect_rank=61, as_asked=_AS_ASKED,
                       detect=lambda t: "<｜tool▁sep｜>" in t))
