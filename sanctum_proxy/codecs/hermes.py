"""Hermes / Qwen2.5 calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in content."""

from __future__ import annotations

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, json_between, register, register_format, template_has
from sanctum_proxy.codecs.writing import json_call
from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "hermes"
OPEN = "<tool_call>"
CLOSE = "</tool_call>"
# The same shape under other tags: Phi-4-mini's `<|tool_call|>...<|/tool_call|>` and FireFunction /
# Phi's `functools[...]` (no closer).
_TAGS = ((OPEN, CLOSE, NAME), ("<|tool_call|>", "<|/tool_call|>", "phi"), ("functools", "", "phi"))
STARTS: tuple[str, ...] = (OPEN, "<|tool_call|>", "functools[")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    for opener, closer, source in _TAGS:
        if opener in text:
            out.extend(_find_tagged(text, tool_names, opener, closer, source))
    out.sort(key=lambda f: f.start)
    return [f for i, f in enumerate(out) if not any(f.start < g.end for g in out[:i])]


def _find_tagged(text: str, names: frozenset[str], opener: str, closer: str, source: str) -> list[Found]:
    out: list[Found] = []
    pos = 0
    closers = (closer,) if closer and closer in text else ()  # a find of an absent tag scans everything
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(opener, pos)
        if start < 0 or json_blocks.full(out):
            break
        body = start + len(opener)
        if opener == "functools" and not text[body : body + 1] == "[":
            pos = body
            continue
        end, calls = json_blocks.tagged(
            text, body, closers=closers, stops=(opener,), source=source, names=names
        )
        if calls:
            out.append(Found(start, end, tuple(calls)))
        elif opener == "functools" and text[body:end].strip() == "[]":  # `functools[]`: no call, still markup
            out.append(Found(start, end, ()))
        pos = max(end, body)
    return out


def render_call(name: str, arguments: JSONValue) -> str:
    return f"{OPEN}\n{json_call(name, arguments)}\n{CLOSE}"


INSTRUCTIONS = (
    "To call a tool, write the call inside <tool_call></tool_call> tags as a JSON object with the keys "
    '"name" and "arguments", for example:\n<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
)

CODEC = register(Codec(NAME, find, STARTS, rank=80, sources=("phi",)))
register_format(Format(NAME, NAME, render_call, instructions=INSTRUCTIONS, detect=template_has(OPEN), detect_rank=130,
                       grammar=json_between(render_call)))
