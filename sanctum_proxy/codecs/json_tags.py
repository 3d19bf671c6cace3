"""JSON calls inside a pair of tags a family's template writes around them; the tags are call markup too."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, register
from sanctum_proxy.core.calls import Found

NAME = "json_tags"
# (opener, closers): a call's markup runs from its opener to the first closer after its JSON.
_TAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("<tool_calls>", ("</tool_calls>",)),
    ("<|action_start|><|plugin|>", ("<|action_end|>",)),
    ("<function_call>", ("</function_call>",)),
    ("<longcat_tool_call>", ("</longcat_tool_call>",)),
    ("<TOOLCALL>", ("</TOOLCALL>",)),
    ("<|tools_prefix|>", ("<|tools_suffix|>",)),
    ("function call<|role_sep|>", ("</s>",)),
    ("<|function_call|>", ("</s>",)),
)
# GigaChat 3's opener starts with prose: the stream holds at the special tokens before it (`holds`).
STARTS: tuple[str, ...] = tuple(o if o != "function call<|role_sep|>" else "<|role_sep|>" for o, _ in _TAGS)
# Written right before an opener, and part of its markup (GigaChat 3's message separator).
_LEAD = re.compile(r"<\|message_sep\|>\s*\Z")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    for opener, closers in _TAGS:
        if opener in text:
            out.extend(_tagged(text, tool_names, opener, tuple(c for c in closers if c in text)))
    out.sort(key=lambda f: f.start)
    return [f for i, f in enumerate(out) if not any(f.start < g.end for g in out[:i])]


def _tagged(text: str, names: frozenset[str], opener: str, closers: tuple[str, ...]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(opener, pos)
        if start < 0 or json_blocks.full(out):
            break
        body = start + len(opener)
        if text[body : body + 64].lstrip()[:1] not in ("{", "["):  # the tag named in prose: no JSON after it
            pos = body
            continue
        end, calls = json_blocks.tagged(text, body, closers=closers, stops=(opener,), source=NAME, names=names)
        if calls:
            lead = _LEAD.search(text, max(0, start - 64), start)
            out.append(Found(lead.start() if lead else start, end, tuple(calls)))
        pos = max(end, body)
    return out


CODEC = register(Codec(NAME, find, STARTS, rank=78, holds=("<|message_sep|>",)))
