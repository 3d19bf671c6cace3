"""MiniCPM 5 calls (openbmb's chat template; vLLM's `minicpm5` parser), an XML element per call."""

from __future__ import annotations

import ast
import json
import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format
from sanctum_proxy.codecs.writing import arguments_text, pairs
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "minicpm"
_GAP = "(?: |\u0120)?"  # the space before `name=`, or the byte-level tokenizer's mark for it, or none
STARTS: tuple[str, ...] = ("<function name=", "<functionname=", "<function\u0120name=")
_QUOTED = r"""(?:"([^"<>\n]{1,256})"|'([^'<>\n]{1,256})')"""
_FUNCTION = re.compile(r"<function" + _GAP + "name=" + _QUOTED + r"\s*>")
_PARAM = re.compile(r"\s*<param" + _GAP + "name=" + _QUOTED.replace("{1,256}", "{0,256}") + r"\s*>")  # "" too
_PARAM_CLOSE = "</param>"
_FUNCTION_CLOSE = re.compile(r"\s*</function>")
_CDATA = re.compile(r"<!\[CDATA\[(.*)\]\]>\Z", re.S)
_WRAPPED = ("arguments", "properties")  # a lone parameter some answers put the whole object in


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _FUNCTION.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        args, k = _params(text, m.end())
        close = _FUNCTION_CLOSE.match(text, k)
        if close is None:
            later = text.find("</function>", k)
            if later < 0 or _FUNCTION.search(text, m.end(), later):  # a tag named in prose, or a call cut short
                pos = m.end()
                continue
            s_close = later + len("</function>")  # a call whose parameters cannot be read: its text, judged broken
            out.append(Found(m.start(), s_close, (Candidate(_name(m), text[m.end() : later], NAME,
                                                            text[m.start() : s_close]),)))
            pos = s_close
            continue
        out.append(Found(m.start(), close.end(), (Candidate(_name(m), _unwrapped(args), NAME,
                                                           text[m.start() : close.end()]),)))
        pos = close.end()
    return out


def _params(text: str, k: int) -> tuple[dict[str, JSONValue], int]:
    args: dict[str, JSONValue] = {}
    while len(args) < MAX_CANDIDATES and (p := _PARAM.match(text, k)) is not None:
        close = text.find(_PARAM_CLOSE, p.end())
        if close < 0:
            break
        value = text[p.end() : close]
        cdata = _CDATA.match(value)
        args.setdefault(_name(p), cdata.group(1) if cdata else value)
        k = close + len(_PARAM_CLOSE)
    return args, k


def _unwrapped(args: dict[str, JSONValue]) -> dict[str, JSONValue]:
    """The object in a lone `arguments` / `properties` parameter (JSON or a Python dict literal), else the args."""
    if len(args) != 1 or next(iter(args)) not in _WRAPPED or not isinstance(value := next(iter(args.values())), str):
        return args
    for read in (json.loads, ast.literal_eval):
        try:
            inner = read(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(inner, dict) and all(isinstance(key, str) for key in inner):
            try:
                values: dict[str, JSONValue] = json.loads(json.dumps(inner))  # a Python literal as JSON values
            except (TypeError, ValueError):  # sets, bytes: not JSON
                return args
            return values
    return args


def _name(m: re.Match[str]) -> str:
    return next(g for g in m.groups() if g is not None).strip()


def render_call(name: str, arguments: JSONValue) -> str:
    kv = pairs(arguments)
    body = (f'<param name="arguments">{arguments_text(arguments)}</param>' if kv is None
            else "".join(f'<param name="{k}">{v}</param>' for k, v in kv))
    return f'<function name="{name}">{body}</function>'


CODEC = register(Codec(NAME, find, STARTS, rank=75, text_values=True))
register_format(Format(NAME, NAME, render_call))
