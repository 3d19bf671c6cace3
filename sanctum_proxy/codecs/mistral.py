"""Calls written as a name then JSON arguments after a special token."""

from __future__ import annotations

import json
import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import json_call
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "mistral"
TAG = "[TOOL_CALLS]"
STARTS: tuple[str, ...] = (TAG,)
# `name[ARGS]{...}`, with Small 3.2's / Magistral's `[CALL_ID]id` between the name and `[ARGS]`.
_NAMED = re.compile(r"\s*([A-Za-z_][\w.\-]{0,255})\s*(?:\[CALL_ID\]\s*([\w\-]{1,64})\s*)?(?:\[ARGS\])?\s*(?=\{)")
# The closer some templates write after the calls; and words a model wrote between the tag and its JSON list.
_CLOSER = re.compile(r"\s*\[/TOOL_CALLS\]")
_CLOSERS = ("[/TOOL_CALLS]",)
_JUNK = re.compile(r"[ \t]*[^\[{\n]{1,64}?(?=\[\s*\{|\{\s*\")")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    return _mistral(text, tool_names) if TAG in text else []


def _mistral(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(TAG, pos)
        if start < 0 or json_blocks.full(out):
            break
        body = start + len(TAG)
        named = _named(text, body)
        if named is not None:
            end, calls = named
        else:
            junk = None if text[body:].lstrip()[:1] in ("[", "{") else _JUNK.match(text, body)
            end, calls = json_blocks.tagged(text, junk.end() if junk else body, closers=_CLOSERS, stops=(TAG,),
                                            source=NAME, names=tool_names)
        closer = _CLOSER.match(text, end)
        if closer:
            end = closer.end()
        if calls:
            out.append(Found(start, end, tuple(calls)))
        pos = max(end, body)
    return out


def _named(text: str, body: int) -> tuple[int, list[Candidate]] | None:
    """`name[ARGS]{...}`: the arguments go on as written, so repair sees (and reports) any mend."""
    m = _NAMED.match(text, body)
    if m is None:
        return None
    end = value_end(text, m.end())
    stop = text.find(TAG, m.end())
    if end is None:
        end = stop if stop >= 0 else len(text)
    args = text[m.end() : end].strip()
    return end, [Candidate(m.group(1), args, NAME, text[body:end].strip(), m.group(2))]


def render_call(name: str, arguments: JSONValue) -> str:
    return f"{TAG}[{json_call(name, arguments)}]"


def render_result(name: str, call_id: str, text: str) -> str:
    result = {"content": text, "call_id": call_id} if call_id else {"content": text}
    return f"[TOOL_RESULTS]{json.dumps(result, ensure_ascii=False)}[/TOOL_RESULTS]"


CODEC = register(Codec(NAME, find, STARTS, rank=90))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has(TAG), detect_rank=100))
