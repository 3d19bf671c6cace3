"""Functionary v3.2 (MeetKai): each part of an answer opened by `>>>` and its recipient."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, json_between, register, register_format, template_has
from sanctum_proxy.codecs.writing import arguments_text
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "functionary"
STARTS: tuple[str, ...] = (">>>",)
_PART = re.compile(r">>>([A-Za-z_][\w.\-]{0,255})[ \t]*\n")
_FIRST = re.compile(r"\s*([A-Za-z_][\w.\-]{0,255})[ \t]*\n(?=\s*[\[{])|\s*(all)\n")
_WS = re.compile(r"\s*")


def opens(text: str) -> bool:
    """Whether the text opens with a Functionary part without its `>>>`."""
    return _FIRST.match(text) is not None


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    first = _FIRST.match(text)
    if first and (first.group(2) or json_blocks.known(first.group(1), tool_names)):
        out += _part(text, first, first.group(1) or "all")
        pos = out[-1].end if out else 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _PART.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        found = _part(text, m, m.group(1))
        out += found
        pos = max(found[-1].end if found else 0, m.end())
    return out


def _part(text: str, m: re.Match[str], name: str) -> list[Found]:
    """The part a recipient line opens: `all` is markup only, a name a call (if its arguments read)."""
    if name == "all":
        return [Found(m.start(), m.end(), ())]
    ws = _WS.match(text, m.end())
    body = ws.end() if ws else m.end()
    nxt = text.find(">>>", m.end())
    stop = nxt if nxt >= 0 else len(text)
    if text.startswith(("{", "["), body):
        closed = value_end(text, body)
        end = closed if closed is not None and closed <= stop else stop
        args: str | dict[str, JSONValue] | None = text[body:end].strip()
    elif name == "python":
        end, args = stop, {"code": text[m.end() : stop].strip()}
    else:
        return []
    return [Found(m.start(), end, (Candidate(name, args or None, NAME, text[m.start() : end]),))]


def render_call(name: str, arguments: JSONValue) -> str:
    return f">>>{name}\n{arguments_text(arguments)}"


def render_call_v31(name: str, arguments: JSONValue) -> str:
    """Functionary v3.1: JSON inside `<function=NAME>...</function>` (read back by qwen_xml)."""
    return f"<function={name}>{arguments_text(arguments)}</function>"


# Streamed, the first line is held until it shows which: `all\n` (passed over) or `NAME\n{` (a call).
_LEAD = (r"\s*(?:[A-Za-z_][\w.\-]{0,255}\n?\s*)?", r"\s*all\n", r"\s*[A-Za-z_][\w.\-]{0,255}\n\s*[\[{]")
CODEC = register(Codec(NAME, find, STARTS, rank=110, opens=opens, lead=_LEAD))
register_format(Format(NAME, NAME, render_call, detect=template_has(">>>"), detect_rank=70, opens_bare=True))
# Its template also has python_tag: `<function=` is matched before Llama's markers.
register_format(Format("functionary_v31", "qwen_xml", render_call_v31, detect=template_has("<function="),
                       detect_rank=90, grammar=json_between(render_call_v31)))
