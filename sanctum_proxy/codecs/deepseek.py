"""DeepSeek's tool-call tokens left in content, in both generations' shapes:

    V3 / R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
              ```json
              {...}
              ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    V3.1+:    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

What stands before `<｜tool▁sep｜>` tells them apart ("function" or nothing: V3/R1, a name: V3.1).
Arguments (fenced or not) go on as written.
"""

from __future__ import annotations

import re

from sanctum_proxy.calls import Candidate, Found
from sanctum_proxy.codecs import json_blocks

NAME = "deepseek"
_CALLS = "<｜tool▁calls▁begin｜>"
_BEGIN = "<｜tool▁call▁begin｜>"
_END = "<｜tool▁call▁end｜>"
STARTS: tuple[str, ...] = (_CALLS, _BEGIN)
_LEAD = re.compile("<｜tool▁calls▁begin｜>\\s*\\Z")
_TRAIL = re.compile("\\s*<｜tool▁calls▁end｜>")
_V3_NAME = re.compile(r"([^\n<]{1,256})\n?")
_HEAD_END = re.compile("<｜tool▁sep｜>|<｜tool▁call▁begin｜>")
_BODY_END = re.compile("<｜tool▁call▁end｜>|<｜tool▁call▁begin｜>")


def find(text: str, spell_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        begin = text.find(_BEGIN, pos)
        if begin < 0 or json_blocks.full(out):
            break
        sep = _HEAD_END.search(text, begin + len(_BEGIN))
        if sep is None or sep.group() == _BEGIN:  # no separator before the next call
            pos = begin + len(_BEGIN)
            continue
        head = text[begin + len(_BEGIN) : sep.start()].strip()
        body = sep.end()
        close = _BODY_END.search(text, body)
        stop = close.start() if close else len(text)
        end = close.end() if close and close.group() == _END else stop
        if head in ("", "function"):
            m = _V3_NAME.match(text, body, stop)
            name = m.group(1).strip() if m else ""
            args = text[m.end() if m else body : stop].strip()
        else:
            name, args = head, text[body:stop].strip()
        start = begin
        lead = _LEAD.search(text, max(pos, begin - 64), begin)
        if lead:
            start = lead.start()
        trail = _TRAIL.match(text, end)
        if trail:
            end = trail.end()
        out.append(Found(start, end, (Candidate(name, args or None, NAME, text[start:end]),)))
        pos = end
    return out
