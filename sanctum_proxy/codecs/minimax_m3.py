"""MiniMax-M3 calls (vLLM's `minimax_m3` parser)."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format
from sanctum_proxy.codecs.writing import arguments_text, pairs
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "minimax_m3"
NS = "]<]minimax[>["
STARTS: tuple[str, ...] = (NS + "<tool_call>", NS + "<invoke ")
_NS = re.escape(NS)
_INVOKE = re.compile(_NS + r"""<invoke\s+name=(?:"([^"<>\n]{1,256})"|'([^'<>\n]{1,256})')\s*>""")
_INVOKE_CLOSE = re.compile(r"\s*" + _NS + r"</invoke>")
_BLOCK_OPEN = re.compile(_NS + r"<tool_call>\s*")
_BLOCK_CLOSE = re.compile(r"\s*" + _NS + r"</tool_call>")
_TAG = re.compile(_NS + r"<(/?)([A-Za-z_][\w.\-]{0,255})>")
MAX_DEPTH = 32


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _INVOKE.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        block = _BLOCK_OPEN.search(text, pos, m.start())
        start = block.start() if block and not text[block.end() : m.start()].strip() else m.start()
        calls: list[Candidate] = []
        k = m.start()
        while len(calls) < MAX_CANDIDATES and (inv := _INVOKE.match(text, k)) is not None:
            read = _invoke(text, inv)
            if read is None:
                break
            k, call = read
            calls.append(call)
            k = _skip_blank(text, k)
        if not calls:  # a cut or broken invoke: its text stays, for a later codec or as content
            pos = m.end()
            continue
        close = _BLOCK_CLOSE.match(text, k)
        end = close.end() if close and start < m.start() else _trimmed_end(text, k)
        out.append(Found(start, end, tuple(calls)))
        pos = end
    return out


def _skip_blank(text: str, k: int) -> int:
    while k < len(text) and text[k] in " \t\r\n":
        k += 1
    return k


def _trimmed_end(text: str, k: int) -> int:
    while k > 0 and text[k - 1] in " \t\r\n":
        k -= 1
    return k


def _invoke(text: str, m: re.Match[str]) -> tuple[int, Candidate] | None:
    """One invoke to its closer; None when an element in it is left open (a cut answer)."""
    read = _children(text, m.end(), 0)
    if read is None:
        return None
    args, k = read
    close = _INVOKE_CLOSE.match(text, k)
    if close is None:
        return None
    name = next(g for g in m.groups() if g is not None).strip()
    value = args if isinstance(args, dict) else {}
    return close.end(), Candidate(name, value, NAME, text[m.start() : close.end()])


def _children(text: str, k: int, depth: int) -> tuple[JSONValue, int] | None:
    """The elements from `k` to the closing tag of their parent: an object, or a list when all are `<item>`;
    None when one is never closed."""
    pairs: list[tuple[str, JSONValue]] = []
    while (tag := _TAG.search(text, k)) is not None and not text[k : tag.start()].strip():
        if tag.group(1):  # the parent's closer: leave it for the caller
            return _object_or_list(pairs), tag.start()
        read = _element(text, tag, depth)
        if read is None:
            return None
        pairs.append((tag.group(2), read[0]))
        k = read[1]
    return (_object_or_list(pairs), k) if not pairs else None


def _element(text: str, tag: re.Match[str], depth: int) -> tuple[JSONValue, int] | None:
    """One element after its opening tag: its children, or its text, to its own closing tag."""
    if depth > MAX_DEPTH:
        return None
    name = tag.group(2)
    nxt = _TAG.search(text, tag.end())
    if nxt is None:
        return None
    if nxt.group(1) and nxt.group(2) == name:  # a leaf: the text up to its closer
        return text[tag.end() : nxt.start()], nxt.end()
    if nxt.group(1) or text[tag.end() : nxt.start()].strip():
        return None  # another element's closer, or text beside elements
    read = _children(text, tag.end(), depth + 1)
    if read is None:
        return None
    value, k = read
    close = _TAG.match(text, k)
    if close is None or not close.group(1) or close.group(2) != name:
        return None
    return value, close.end()


def _object_or_list(pairs: list[tuple[str, JSONValue]]) -> JSONValue:
    if pairs and all(key == "item" for key, _ in pairs):
        return [value for _, value in pairs]
    out: dict[str, JSONValue] = {}
    for key, value in pairs:
        if key in out:  # a name written twice: the values as a list
            prior = out[key]
            out[key] = [*prior, value] if isinstance(prior, list) else [prior, value]
        else:
            out[key] = value
    return out


def render_call(name: str, arguments: JSONValue) -> str:
    """One invoke; a value that is not a string goes as its JSON text (typed back by the schema)."""
    kv = pairs(arguments)
    body = arguments_text(arguments) if kv is None else "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in kv)
    return f'{NS}<tool_call>\n{NS}<invoke name="{name}">{body}{NS}</invoke>\n{NS}</tool_call>'


CODEC = register(Codec(NAME, find, STARTS, rank=71, text_values=True, holds=(NS,)))
register_format(Format(NAME, NAME, render_call))
