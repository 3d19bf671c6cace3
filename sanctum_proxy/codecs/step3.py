"""Step3 calls (stepfun-ai/step3's chat template; vLLM's `step3` parser), XML invokes between special tokens."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format
from sanctum_proxy.codecs.writing import arguments_text, pairs
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "step3"
_BEGIN, _CALL, _INVOKE_TAG = "<｜tool_calls_begin｜>", "<｜tool_call_begin｜>", "<steptml:invoke"
STARTS: tuple[str, ...] = (_BEGIN, _CALL, _INVOKE_TAG)
_GLUE = re.compile(r"(?:\s*(?:<｜tool_calls_begin｜>|<｜tool_call_begin｜>|<｜tool_call_end｜>|<｜tool_sep｜>"
                   r"|function<｜tool_sep｜>[^\n<]{0,256}\n?))*")
_TAIL = re.compile(r"(?:\s*(?:<｜tool_call_end｜>|<｜tool_sep｜>|<｜tool_calls_end｜>))*")
_QUOTED = r"""(?:"([^"<>\n]{1,256})"|'([^'<>\n]{1,256})'|([^\s"'<>]{1,256}))"""
_INVOKE = re.compile(r"<steptml:invoke\s+name=" + _QUOTED + r"\s*>")
_PARAMETER = re.compile(r"\s*<steptml:parameter\s+name=" + _QUOTED + r"\s*>")
_PARAMETER_END = re.compile(r"</steptml:parameter\s*>|<steptml:parameter\b|</steptml:invoke\s*>")
_INVOKE_CLOSE = re.compile(r"\s*</steptml:invoke\s*>")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        hits = [i for s in STARTS if (i := text.find(s, pos)) >= 0]
        if not hits or json_blocks.full(out):
            break
        start = min(hits)
        calls: list[Candidate] = []
        k = _past(_GLUE, text, start)
        while len(calls) < MAX_CANDIDATES and (m := _INVOKE.match(text, k)) is not None:
            k, call = _invoke(text, m)
            calls.append(call)
            k = _past(_GLUE, text, k)
        if calls:
            end = _past(_TAIL, text, k)
            out.append(Found(start, len(text[:end].rstrip()), tuple(calls)))
            pos = end
        else:
            pos = start + 1
    return out


def _past(pattern: re.Pattern[str], text: str, k: int) -> int:
    """Where a run of the glue tokens from `k` ends (`k` when there is none)."""
    m = pattern.match(text, k)
    return m.end() if m else k


def _invoke(text: str, m: re.Match[str]) -> tuple[int, Candidate]:
    args: dict[str, JSONValue] = {}
    repairs: list[str] = []
    k = m.end()
    while (p := _PARAMETER.match(text, k)) is not None:
        stop = _PARAMETER_END.search(text, p.end())
        if stop is None or not stop.group().startswith("</steptml:parameter"):
            repairs.append("unclosed_tag")
        value_end = stop.start() if stop else len(text)
        args.setdefault(_name(p), text[p.end() : value_end])
        k = stop.end() if stop and stop.group().startswith("</steptml:parameter") else value_end
    close = _INVOKE_CLOSE.match(text, k)
    if close:
        k = close.end()
    else:
        repairs.append("unclosed_tag")
    return k, Candidate(_name(m).strip(), args, NAME, text[m.start() : k], None, tuple(dict.fromkeys(repairs)))


def _name(m: re.Match[str]) -> str:
    return next(g for g in m.groups() if g is not None)


def render_call(name: str, arguments: JSONValue) -> str:
    kv = pairs(arguments)
    body = arguments_text(arguments) if kv is None else "".join(
        f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in kv)
    return (f'{_BEGIN}{_CALL}function<｜tool_sep｜>{name}\n<steptml:invoke name="{name}">{body}</steptml:invoke>'
            "<｜tool_call_end｜><｜tool_calls_end｜>")


CODEC = register(Codec(NAME, find, STARTS, rank=73, text_values=True))
register_format(Format(NAME, NAME, render_call))
