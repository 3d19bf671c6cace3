"""Llama 3.x / 4 calls."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, json_between, register, register_format, template_has
from sanctum_proxy.codecs.writing import json_call
from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "llama"
STARTS: tuple[str, ...] = ("<|python_tag|>", "<|python_start|>")
_CLOSERS = ("<|python_end|>", "<|eom_id|>", "<|eot_id|>")
_PYTHONIC = re.compile(r"\s*\[?\s*[A-Za-z_][\w.]*\s*\(")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    starts = tuple(t for t in STARTS if t in text)  # str.find of an absent tag scans everything, each time
    closers = tuple(t for t in _CLOSERS if t in text)
    for _ in range(json_blocks.MAX_ATTEMPTS):
        if json_blocks.full(out):
            break
        hits = [(i, t) for t in starts if (i := text.find(t, pos)) >= 0]
        if not hits:
            break
        start, tag = min(hits)
        body = start + len(tag)
        if tag == "<|python_start|>" and _PYTHONIC.match(text, body):  # Llama 4's pythonic list: pythonic.py's
            pos = body
            continue
        end, calls = json_blocks.tagged(
            text, body, closers=closers, stops=starts, source=NAME, names=tool_names
        )
        if calls:
            out.append(Found(start, end, tuple(calls)))
        pos = max(end, body)
    return out


def render_call(name: str, arguments: JSONValue) -> str:
    """Meta's template writes the call bare, with `parameters` (read back as JSON)."""
    return json_call(name, arguments, key="parameters")


CODEC = register(Codec(NAME, find, STARTS, rank=100))
register_format(Format("llama3", "json", render_call, detect_rank=110, grammar=json_between(render_call),
                       detect=template_has("<|python_tag|>", "<|start_header_id|>ipython")))
