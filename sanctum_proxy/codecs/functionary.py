"""Functionary v3.2 (MeetKai): each part of an answer opened by `>>>` and its recipient:

    >>>all
    Let me look that up.
    >>>get_weather
    {"city": "Paris"}

`>>>all` opens text (content); `>>>NAME` opens a call whose JSON arguments follow on the next line
(`python` may be followed by raw code, read as {"code": ...}). Arguments go on as written.
"""

from __future__ import annotations

import re

from sanctum_proxy.calls import Candidate, Found
from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.repair.extract import value_end

NAME = "functionary"
STARTS: tuple[str, ...] = (">>>",)
_PART = re.compile(r">>>([A-Za-z_][\w.\-]{0,255})[ \t]*\n")
_WS = re.compile(r"\s*")


def find(text: str, spell_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _PART.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        name = m.group(1)
        if name == "all":
            out.append(Found(m.start(), m.end(), ()))
            pos = m.end()
            continue
        ws = _WS.match(text, m.end())
        body = ws.end() if ws else m.end()
        nxt = text.find(">>>", m.end())
        stop = nxt if nxt >= 0 else len(text)
        if text.startswith(("{", "["), body):
            closed = value_end(text, body)
            end = closed if closed is not None and closed <= stop else stop
            args: str | dict[str, str] | None = text[body:end].strip()
        elif name == "python":
            end, args = stop, {"code": text[m.end() : stop].strip()}
        else:
            pos = m.end()
            continue
        out.append(Found(m.start(), end, (Candidate(name, args or None, NAME, text[m.start() : end]),)))
        pos = max(end, m.end())
    return out
