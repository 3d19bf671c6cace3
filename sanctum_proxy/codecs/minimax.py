"""MiniMax-M2 / M2.1 / M2.5 calls (MiniMaxAI's chat template; vLLM's and llama.cpp's `minimax_m2`)."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks, qwen_xml
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import pairs, to_json
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "minimax"
OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
_CLOSE = re.compile(r"\s*</minimax:tool_call\s*>")
_INVOKE = re.compile(r"""<invoke\s+name=(?:"([^"<>\n]{1,256})"|'([^'<>\n]{1,256})'|([^\s"'<>]{1,256}))\s*>""")
_INVOKE_CLOSE = re.compile(r"</invoke\s*>")
_PARAMETER = re.compile(r"""<parameter\s+name=(?:"([^"<>\n]{1,256})"|'([^'<>\n]{1,256})'|([^\s"'<>]{1,256}))\s*>""")
_PARAMETER_CLOSE = re.compile(r"</parameter\s*>")
_ANY_TAG = re.compile(r"</?(?:parameter|invoke|minimax:tool_call)\b")
_WS = re.compile(r"[ \t\r\n]*")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(OPEN, pos)
        if start < 0 or json_blocks.full(out):
            break
        calls, k = _invokes(text, start + len(OPEN))
        close = _CLOSE.match(text, k)
        end = close.end() if close else k
        if calls or close:  # a bare mention of the tag in prose is text
            out.append(Found(start, end, tuple(calls)))
        pos = max(end, start + len(OPEN))
    return out


def _invokes(text: str, k: int) -> tuple[list[Candidate], int]:
    """The invokes from `k` on (whitespace between), and where the last one ended."""
    calls: list[Candidate] = []
    while len(calls) < MAX_CANDIDATES and (m := _INVOKE.match(text, _skip_ws(text, k))) is not None:
        k, call = _invoke(text, m)
        calls.append(call)
    return calls, k


def _invoke(text: str, m: re.Match[str]) -> tuple[int, Candidate]:
    name = _name(m).strip()
    body = _skip_ws(text, m.end())
    repairs: list[str] = []
    args: str | dict[str, JSONValue]
    if text.startswith(("{", "["), body) and (end := value_end(text, body)) is not None:
        args, k = text[body:end], end  # the arguments as one JSON object (how a broken earlier call is quoted)
    else:
        args, k, repairs = _parameters(text, m.end())
    close = _INVOKE_CLOSE.match(text, _skip_ws(text, k))
    if close:
        k = close.end()
    else:
        repairs.append("unclosed_tag")
    return k, Candidate(name, args, NAME, text[m.start() : k], None, tuple(dict.fromkeys(repairs)))


def _parameters(text: str, k: int) -> tuple[dict[str, JSONValue], int, list[str]]:
    args: dict[str, JSONValue] = {}
    repairs: list[str] = []
    while (p := _PARAMETER.match(text, _skip_ws(text, k))) is not None:
        nxt = _ANY_TAG.search(text, p.end())  # its closer, or the tag that cuts it short (linear: no rescan)
        close = _PARAMETER_CLOSE.match(text, nxt.start()) if nxt is not None else None
        if close is None:
            repairs.append("unclosed_tag")
            stop = nxt.start() if nxt is not None else len(text)
            value, k = text[p.end() : stop].strip("\n").rstrip(), stop
        else:
            value, k = qwen_xml.laid_out(text[p.end() : close.start()]), close.end()
        args.setdefault(_name(p).strip(), value)
    return args, k, repairs


def _name(m: re.Match[str]) -> str:
    return next(g for g in m.groups() if g is not None)


def _skip_ws(text: str, k: int) -> int:
    blank = _WS.match(text, k)
    return blank.end() if blank else k


def render_call(name: str, arguments: JSONValue) -> str:
    kv = pairs(arguments)
    if kv is None:  # broken JSON from an earlier turn: written inside the invoke as it was
        body = arguments if isinstance(arguments, str) else to_json(arguments)
    else:
        body = "\n".join(f'<parameter name="{key}">{value}</parameter>' for key, value in kv)
    return f'{OPEN}\n<invoke name="{name}">\n{body}\n</invoke>\n{CLOSE}'


def render_result(name: str, call_id: str, text: str) -> str:
    return f"<response>{text}</response>"


CODEC = register(Codec(NAME, find, (OPEN,), rank=74, text_values=True))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has(OPEN), detect_rank=62))
