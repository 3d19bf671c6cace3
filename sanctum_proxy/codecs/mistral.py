"""Calls written as a name then JSON arguments after a special token.

Mistral after `[TOOL_CALLS]`: Nemo's JSON array (`[{"name": ..., "arguments": ..., "id": ...}]`) and
Small 3.2 / Devstral's `name[ARGS]{...}`, possibly several `[TOOL_CALLS]` in a row. (DeepSeek's tokens
are read by `deepseek`.)

Text after the call (v0.3 often adds prose) stays content.
"""

from __future__ import annotations

import json
import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import json_call
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.lenient_json import value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "mistral"
TAG = "[TOOL_CALLS]"
STARTS: tuple[str, ...] = (TAG,)
_NAMED = re.compile(r"\s*([A-Za-z_][\w.\-]{0,255})\s*(?:\[ARGS\])?\s*(?=\{)")


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
            end, calls = json_blocks.tagged(
                text, body, closers=(), stops=(TAG,), source=NAME, names=tool_names
            )
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
    return end, [Candidate(m.group(1), args, NAME, text[body:end].strip())]


def render_call(name: str, arguments: JSONValue) -> str:
    return f"{TAG}[{json_call(name, arguments)}]"


def render_result(name: str, call_id: str, text: str) -> str:
    result = {"content": text, "call_id": call_id} if call_id else {"content": text}
    return f"[TOOL_RESULTS]{json.dumps(result, ensure_ascii=False)}[/TOOL_RESULTS]"


CODEC = register(Codec(NAME, find, STARTS, rank=90))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has(TAG), detect_rank=100))
