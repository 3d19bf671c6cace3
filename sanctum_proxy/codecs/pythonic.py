"""Pythonic calls (Llama 3.2 / LFM2 style)."""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from typing import Any

from sanctum_proxy.codecs import hermes, json_blocks, python_scan
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import as_object, to_json
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "pythonic"
OPEN = "<|tool_call_start|>"
CLOSE = "<|tool_call_end|>"
# The tags pythonic calls come in: LFM2's, OLMo 3's (one call a line) and Llama 4's (a list; llama.py reads JSON
# between the same tags).
TAGS = ((OPEN, CLOSE), ("<function_calls>", "</function_calls>"), ("<|python_start|>", "<|python_end|>"))
STARTS: tuple[str, ...] = (*(opener for opener, _ in TAGS), "```tool_code", "[")
MAX_SOURCE_CHARS = 64_000
MAX_TOLERANT = 8
MAX_CUT_SHORT = 2
_BARE = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_PLACEHOLDER = re.compile(python_scan.PLACEHOLDER.replace("%d", r"(\d+)"))
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _NotLiteral(Exception):
    pass


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out = _wrapped(text, tool_names)
    out += _tool_code(text, tool_names) if "```tool_code" in text else []
    if "[" not in text:
        return out + _lines(text, tool_names, out)
    taken = [(f.start, f.end) for f in out]
    pos = 0
    tolerant = MAX_TOLERANT  # the call-by-call readings of unclosed lists, each over at most MAX_SOURCE_CHARS
    cut_short = MAX_CUT_SHORT  # readings of a list whose `]` never came (each to the end of the text)
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _BARE.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        end = value_end(text, m.start(), parens=True)
        if end is None and tolerant > 0:  # quotes that do not pair up as Python's do: read call by call
            tolerant -= 1
            end = python_scan.bracketed(text[: m.start() + MAX_SOURCE_CHARS], m.start(), MAX_CANDIDATES)
        if end is None and cut_short > 0:
            cut_short -= 1
            unclosed = _unclosed(text, m.start(), tool_names)
            if unclosed is not None and not any(s < unclosed.end and m.start() < e for s, e in taken):
                out.append(unclosed)
                break
        if end is None:
            pos = m.end()
            continue
        calls = parse(text[m.start() : end], explicit=False, names=tool_names)
        if calls and not any(s < end and m.start() < e for s, e in taken):
            out.append(Found(m.start(), end, tuple(calls)))
        pos = end if calls else m.end()
    out += _lines(text, tool_names, out)
    return sorted(out, key=lambda f: f.start)


def _unclosed(text: str, start: int, names: frozenset[str]) -> Found | None:
    """A list of calls whose `]` never came: the rest of the answer after its `[` holds only whole calls."""
    source = text[start:].rstrip().rstrip(",")
    if len(source) > MAX_SOURCE_CHARS or not source.endswith(")"):
        return None
    calls = parse(source + "]", explicit=False, names=names)
    return Found(start, start + len(source), tuple(calls)) if calls else None


# A line that opens with a name and a parenthesis: Granite's calls with no list around them.
_LINE_CALL = re.compile(r"^[ \t]*([A-Za-z_][\w.]*)[ \t]*\(", re.M)


def _lines(text: str, names: frozenset[str], taken: list[Found]) -> list[Found]:
    """Bare calls one to a line, read only when every line from the first to the end is a known tool's call."""
    out: list[Found] = []
    for m in _LINE_CALL.finditer(text):
        if len(out) >= json_blocks.MAX_ATTEMPTS or not json_blocks.known(m.group(1), names):
            continue
        if text.count("```", 0, m.start()) % 2 or any(f.start <= m.start() < f.end for f in taken):
            continue
        end = value_end(text, m.end() - 1, parens=True)
        line_end = text.find("\n", end) if end is not None else -1
        line_end = len(text) if line_end < 0 else line_end
        if end is None or text[end:line_end].strip(" \t;"):
            return []  # a call-shaped line that is not one whole call: prose, or an example in it
        calls = parse(text[m.start(1) : end], explicit=False, names=names)
        if not calls:
            return []
        if out and text[out[-1].end : m.start()].strip():
            return []  # prose between two call lines
        out.append(Found(m.start(1), end, tuple(calls)))
    if out and text[out[-1].end :].strip(" \t\r\n;"):
        return []  # text after the last call: the lines were part of prose
    return out


def _wrapped(text: str, names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    for opener, closer in TAGS:
        if opener in text:
            out.extend(_tagged(text, names, opener, closer))
    return out


def _tagged(text: str, names: frozenset[str], opener: str, closer: str) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(opener, pos)
        if start < 0:
            break
        body = start + len(opener)
        close = text.find(closer, body)
        stop = close if close >= 0 else len(text)
        end = close + len(closer) if close >= 0 else stop
        calls = parse(text[body:stop].strip(), explicit=True, names=names)
        if calls:
            out.append(Found(start, end, tuple(calls)))
        pos = end
    return out


_TOOL_CODE = re.compile(r"```tool_code[ \t]*\n(.*?)(?:```|\Z)", re.S)


def _tool_code(text: str, names: frozenset[str]) -> list[Found]:
    """Gemma's ```tool_code fences (explicit): `f(a=1)`, `[f(a=1), ...]` or `print(f(a=1))`."""
    out: list[Found] = []
    for m in _TOOL_CODE.finditer(text):
        calls = parse(m.group(1).strip(), explicit=True, names=names, source_name="gemma")
        if calls:
            out.append(Found(m.start(), m.end(), tuple(calls)))
        if json_blocks.full(out):
            break
    return out


def parse(source: str, *, explicit: bool, names: frozenset[str], source_name: str = NAME) -> list[Candidate]:
    """The calls in `[f(a=1), g(b=2)]` (or a single `f(a=1)`); [] unless all of it reads as calls."""
    if not source or len(source) > MAX_SOURCE_CHARS:
        return []
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _tolerant(source, explicit, names, source_name)
    if (
        explicit
        and isinstance(tree, ast.Call)
        and isinstance(tree.func, ast.Name)
        and tree.func.id == "print"
    ):
        tree = tree.args[0] if len(tree.args) == 1 and not tree.keywords else tree
    nodes = tree.elts if isinstance(tree, ast.List | ast.Tuple) else [tree]
    calls: list[Candidate] = []
    for node in nodes:
        call = _candidate(node, source, explicit, names, source_name)
        if call is None:
            return _tolerant(source, explicit, names, source_name)
        calls.append(call)
    return calls


def _tolerant(source: str, explicit: bool, names: frozenset[str], source_name: str) -> list[Candidate]:
    """The calls `ast` could not read whole, each read on its own (codecs/python_scan.py): a call that still
    does not read (a bytes value, an expression) is left out, its siblings stand."""
    pieces = python_scan.calls(source, MAX_CANDIDATES)
    calls: list[Candidate] = []
    for piece in pieces or ():
        try:
            node = ast.parse(piece.source, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        call = _candidate(node, source[piece.start : piece.end], explicit, names, source_name, piece.strings)
        if call is not None:
            calls.append(call)
    return calls


def _candidate(
    node: ast.expr, source: str, explicit: bool, names: frozenset[str], source_name: str,
    strings: tuple[str, ...] = (),
) -> Candidate | None:
    """One call node; `strings`: the values of python_scan's string placeholders (then `source` is the call)."""
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _dotted(node.func)
    if name is None or not (explicit or json_blocks.known(name, names)):
        return None
    try:
        args = {kw.arg: _literal(kw.value, strings) for kw in node.keywords if kw.arg is not None}
    except (_NotLiteral, RecursionError):
        return None
    if len(args) != len(node.keywords):
        return None  # **kwargs
    raw = source if strings else ast.get_source_segment(source, node) or source
    return Candidate(name, args, source_name, raw)


def _dotted(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        head = _dotted(func.value)
        return f"{head}.{func.attr}" if head else None
    return None


def _literal(node: ast.expr, strings: tuple[str, ...] = ()) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | type(None)):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise _NotLiteral  # 1e999: no JSON holds it
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.Name) and (placeholder := _PLACEHOLDER.fullmatch(node.id)) and strings:
        return strings[int(placeholder.group(1))]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_literal(e, strings) for e in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_literal(k, strings) if k is not None else None for k in node.keys]
        if not all(isinstance(k, str) for k in keys):
            raise _NotLiteral
        return dict(zip(keys, (_literal(v, strings) for v in node.values), strict=True))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand, strings)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise _NotLiteral


def render_call(name: str, arguments: JSONValue) -> str:
    args = as_object(arguments)
    if not isinstance(args, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in args):
        return hermes.render_call(name, arguments)  # not writable as keyword arguments
    return f"[{name}(" + ", ".join(f"{k}={to_json(v)}" for k, v in args.items()) + ")]"


# `[` alone is prose; `[name(` is a call.
CODEC = register(Codec(NAME, find, STARTS, rank=120, opens=lambda text: "(" in text, generic=("[",),
                       shape=r"\[\s*[A-Za-z_][\w.]*\(", partial_shape=r"\[\s*[A-Za-z_][\w.]*|\[\s*"))
register_format(Format(NAME, NAME, render_call, detect=template_has(OPEN), detect_rank=120))
