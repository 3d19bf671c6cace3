"""Qwen3-Coder / Nemotron XML calls and Functionary v3.1's `<function=name>{json}</function>`."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, Scanner, register, register_format, template_has
from sanctum_proxy.codecs.writing import arguments_text, pairs
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "qwen_xml"
STARTS: tuple[str, ...] = ("<function=",)
_FUNCTION = re.compile(r"<function=([^>\n]{1,256})>")
_PARAMETER_OPEN = re.compile(r"\s*<parameter=([^>\n]{1,256})>")
_PARAMETER_CLOSE = "</parameter>"
_STRAY = re.compile(r"(?:\s*</parameter>)+")
_END = re.compile(r"\s*</function>")
_WRAP_OPEN = re.compile(r"<tool_call>\s*\Z")
_WRAP_CLOSE = re.compile(r"\s*</tool_call>")
_LEAD = re.compile(r"[ \t]*\n?")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    scan = Scanner(text)  # every closer looked for once: the reader only moves forward
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _FUNCTION.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        end, call = _call(scan, m)
        start = m.start()
        wrap = _WRAP_OPEN.search(text, max(0, start - 64), start)
        if wrap:
            start = wrap.start()
        close = _WRAP_CLOSE.match(text, end)
        if close:
            end = close.end()
        out.append(Found(start, end, (call,)))
        pos = max(end, m.end())
    return out


def _call(scan: Scanner, m: re.Match[str]) -> tuple[int, Candidate]:
    text = scan.text
    name = m.group(1).strip()
    k = m.end()
    lead = re.compile(r"\s*").match(text, k)
    body = lead.end() if lead else k
    if text.startswith(("{", "["), body):
        end = value_end(text, body)
        if end is not None:
            fin = _END.match(text, end)
            stop = fin.end() if fin else end
            return stop, Candidate(name, text[body:end], NAME, text[m.start() : stop])
    args, k, repairs = _parameters(scan, k)
    fin = _END.match(text, k)
    if fin:
        k = fin.end()
    else:
        k = _unclosed_end(scan, k)
        repairs.append("unclosed_tag")
    raw = text[m.start() : k]
    return k, Candidate(name, args, NAME, raw, None, tuple(dict.fromkeys(repairs)))


def _parameters(scan: Scanner, k: int) -> tuple[dict[str, JSONValue], int, list[str]]:
    """`<parameter=name>value</parameter>` pairs from k on; an unclosed value ends at the next tag."""
    text = scan.text
    args: dict[str, JSONValue] = {}
    repairs: list[str] = []
    while p := _PARAMETER_OPEN.match(text, k):
        close = scan.find(_PARAMETER_CLOSE, p.end())
        cut = _next_tag(scan, p.end(), close)
        if cut >= 0 or close < 0:  # `</parameter>` left out: the value ends at the next tag, or the end
            repairs.append("unclosed_tag")
            if cut < 0:
                cut = len(text)
                repairs.append("unclosed_at_end")
            args.setdefault(p.group(1).strip(), _unclosed_value(text[p.end() : cut]))
            k = cut
            continue
        args.setdefault(p.group(1).strip(), laid_out(text[p.end() : close]))
        k = close + len(_PARAMETER_CLOSE)
        stray = _STRAY.match(text, k)
        if stray and stray.end() > k:
            repairs.append("stray_closing_tag")
            k = stray.end()
    return args, k, repairs


def laid_out(value: str) -> str:
    """A closed value less the template's newlines around it and its block indent; an inline value stays whole."""
    if not value.startswith("\n"):
        return value
    value = value[1:]
    head, newline, indent = value.rpartition("\n")
    if not newline or indent.strip(" \t"):  # the last line holds text: no layout after it
        return value
    if not indent:
        return head
    lines = head.split("\n")
    if all(line.startswith(indent) or not line.strip() for line in lines):
        return "\n".join(line[len(indent):] for line in lines)
    return head


def _unclosed_value(value: str) -> str:
    """A value without its closer, less the layout blanks around it."""
    lead = _LEAD.match(value)
    return value[lead.end() if lead else 0 :].rstrip()


_CUTS = ("</function>", "<parameter=", "</tool_call>", "<function=", "<tool_call>")


def _next_tag(scan: Scanner, pos: int, close: int) -> int:
    """Where the next tag ending an unclosed value begins, if before `close`."""
    limit = close if close >= 0 else len(scan.text)
    hits = [i for t in _CUTS if (i := scan.find(t, pos)) >= 0 and i < limit]
    return min(hits) if hits else -1


def _unclosed_end(scan: Scanner, k: int) -> int:
    """Without `</function>` the call runs to `</tool_call>` (left for the wrapper) or the next call."""
    ends = [i for t in ("</tool_call>", "<function=", "<tool_call>") if (i := scan.find(t, k)) >= 0]
    return min(ends) if ends else len(scan.text)


def render_call(name: str, arguments: JSONValue, wrap: tuple[str, str] = ("<tool_call>", "</tool_call>")) -> str:
    kv = pairs(arguments)
    if kv is None:
        body = arguments_text(arguments)
    else:
        body = "\n".join(f"<parameter={k}>\n{v}\n</parameter>" for k, v in kv)
    return f"{wrap[0]}\n<function={name}>\n{body}\n</function>\n{wrap[1]}"


CODEC = register(Codec(NAME, find, STARTS, rank=70, text_values=True))
register_format(Format(NAME, NAME, render_call, detect=template_has("<parameter="), detect_rank=80))
