"""ByteDance Seed-OSS: Qwen3-Coder's XML call body inside `<seed:tool_call>`, reasoning in `<seed:think>`."""

from __future__ import annotations

from dataclasses import replace

from sanctum_proxy.codecs import json_blocks, qwen_xml
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "seed"
_CALL, _CALL_END = "<seed:tool_call>", "</seed:tool_call>"
_THINK, _THINK_END = "<seed:think>", "</seed:think>"
STARTS: tuple[str, ...] = (_CALL, _THINK)


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out = [Found(f.start, f.end, (), _inner(text[f.start : f.end], _THINK, _THINK_END))
           for f in _blocks(text, _THINK, _THINK_END, (_CALL,), closer_wins=True)]
    for f in out:
        text = text[: f.start] + " " * (f.end - f.start) + text[f.end :]
    for block in _blocks(text, _CALL, _CALL_END, (_CALL, _THINK)):
        if json_blocks.full(out):
            break
        inner = text[block.start + len(_CALL) : block.end]
        inner = inner[: -len(_CALL_END)] if inner.endswith(_CALL_END) else inner
        calls = [replace(c, source=NAME) for f in qwen_xml.find(inner, tool_names) for c in f.candidates]
        out.append(Found(block.start, block.end, tuple(calls)))
    return sorted(out, key=lambda f: f.start)


def _inner(block: str, opener: str, closer: str) -> str:
    block = block[len(opener) :]
    return (block[: -len(closer)] if block.endswith(closer) else block).strip()


def _blocks(text: str, opener: str, closer: str, stops: tuple[str, ...], *, closer_wins: bool = False
            ) -> list[Found]:
    """Spans from each opener to its closer, or to the next stop; a think block may quote a whole call."""
    out: list[Found] = []
    pos = 0
    while (start := text.find(opener, pos)) >= 0 and len(out) < json_blocks.MAX_ATTEMPTS:
        body = start + len(opener)
        close = text.find(closer, body)
        nexts = [i for s in stops if (i := text.find(s, body)) >= 0]
        if close >= 0 and (closer_wins or not any(i < close for i in nexts)):
            end = close + len(closer)
        else:
            end = min(nexts, default=len(text))
        out.append(Found(start, end, ()))
        pos = end
    return out


def render_call(name: str, arguments: JSONValue) -> str:
    return qwen_xml.render_call(name, arguments, (_CALL, _CALL_END))


CODEC = register(Codec(NAME, find, STARTS, rank=30, text_values=True))
register_format(Format(NAME, NAME, render_call, detect=template_has(_CALL), detect_rank=40,
                       families=("seed_oss",)))
