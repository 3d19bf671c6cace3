"""FunctionGemma calls (google/functiongemma-270m's chat template; vLLM's `functiongemma` parser)."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format
from sanctum_proxy.codecs.writing import pairs
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "functiongemma"
OPEN, CLOSE, ESCAPE = "<start_function_call>", "<end_function_call>", "<escape>"
STARTS: tuple[str, ...] = (OPEN,)
_HEAD = re.compile(r"\s*call:([A-Za-z_][\w.\-]{0,255})\{")
_KEY = re.compile(r"[\s,]*([A-Za-z_][\w.\-]{0,255})\s*:")
_BARE = re.compile(r"[^,}<]*")
_END = re.compile(r"[\s,]*\}")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(OPEN, pos)
        if start < 0 or json_blocks.full(out):
            break
        close = text.find(CLOSE, start + len(OPEN))
        stop = close if close >= 0 else len(text)
        end = close + len(CLOSE) if close >= 0 else stop
        head = _HEAD.match(text, start + len(OPEN), stop)
        if head is not None:
            args = _arguments(text[head.end() : stop])
            body = text[head.end() - 1 : stop]
            out.append(Found(start, end, (Candidate(head.group(1), args if args is not None else body, NAME,
                                                    text[start:end]),)))
        pos = end
    return out


def _arguments(body: str) -> dict[str, JSONValue] | None:
    """`k:<escape>v<escape>,n:3}` as text values; None when it does not read that way."""
    args: dict[str, JSONValue] = {}
    k = 0
    while len(args) < MAX_CANDIDATES:
        if (end := _END.match(body, k)) is not None:
            return args if not body[end.end() :].strip() else None
        key = _KEY.match(body, k)
        if key is None:
            return None
        k = key.end()
        if body.startswith(ESCAPE, k):
            close = body.find(ESCAPE, k + len(ESCAPE))
            if close < 0:
                return None
            args.setdefault(key.group(1), body[k + len(ESCAPE) : close])
            k = close + len(ESCAPE)
        else:
            bare = _BARE.match(body, k)
            value = bare.group().strip() if bare else ""
            if not value:
                return None
            args.setdefault(key.group(1), value)
            k = bare.end() if bare else k
    return None


def render_call(name: str, arguments: JSONValue) -> str:
    kv = pairs(arguments) or []
    body = ",".join(f"{k}:{ESCAPE}{v}{ESCAPE}" for k, v in kv)
    return f"{OPEN}call:{name}{{{body}}}{CLOSE}"


CODEC = register(Codec(NAME, find, STARTS, rank=36, text_values=True))
register_format(Format(NAME, NAME, render_call))
