"""Gemma 4 calls left in content (its chat template writes them; llama.cpp's `peg-gemma4` parser and Ollama's
model/parsers/gemma4.go read them):

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Keys are bare words; a string value sits between `<|"|>` tokens; numbers, booleans, null, objects and arrays are
written as in JSON. Variants read (the wild corpus: jundot/omlx#581, #593, ml-explore/mlx-lm#3460,
Gitlawb/openclaude#380): ASCII quotes instead of the `<|"|>` tokens, bare unquoted words as string values, and
`call:NAME{...}` with no `<|tool_call>` around it (known names only, at the start of a line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import as_object, to_json
from sanctum_proxy.core.calls import Candidate, Found

NAME = "gemma4"
OPEN = "<|tool_call>"
CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
STARTS: tuple[str, ...] = (OPEN, "call:")
_CALL = re.compile(r"call:([A-Za-z_][\w.\-]{0,255})\{")
_BARE_CALL = re.compile(r"(?m)^[ \t]*call:([A-Za-z_][\w.\-]{0,255})\{")
_KEY = re.compile(r"\s*(?:\"([^\"\n]{1,256})\"|([A-Za-z_][\w.\-]{0,255}))\s*:")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[^,}\]\n<]*")  # a bare value runs to a separator (or any tag: `<|"|>` among them)
_LITERALS = {"true": True, "false": False, "null": None}
MAX_DEPTH = 32


class _Unreadable(Exception):
    pass


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(OPEN, pos)
        if start < 0 or json_blocks.full(out):
            break
        m = _CALL.match(text, start + len(OPEN))
        if m is None:
            pos = start + len(OPEN)
            continue
        found = _call(text, start, m, explicit=True)
        out.append(found)
        pos = found.end
    explicit, last = list(out), 0  # the wrapped calls (at most MAX_ATTEMPTS), the end of the last bare one
    for m in _BARE_CALL.finditer(text):
        if json_blocks.full(out) or len(out) >= json_blocks.MAX_ATTEMPTS:
            break
        at = m.start(0) + len(m.group(0)) - len(m.group(0).lstrip())
        if at < last or any(f.start <= at < f.end for f in explicit) or not json_blocks.known(m.group(1), tool_names):
            continue
        found = _call(text, at, _CALL.match(text, at), explicit=False)  # type: ignore[arg-type]
        out.append(found)
        last = found.end
    return sorted(out, key=lambda f: f.start)


def _call(text: str, start: int, m: re.Match[str], *, explicit: bool) -> Found:
    """One call from `call:NAME{`: its arguments read to their closing brace, then the closing token if one follows;
    arguments that cannot be read go on as written (tier 2 reports them)."""
    name = m.group(1)
    try:
        args, end = _Reader(text).object(m.end() - 1, 0)
        arguments: str | dict[str, Any] | None = args
        repairs: tuple[str, ...] = ()
    except _Unreadable:
        stop = text.find(CLOSE, m.end())
        end = stop if stop >= 0 else len(text)
        arguments, repairs = text[m.end() - 1 : end], ("unclosed_braces",) if stop < 0 else ()
    close = end + len(CLOSE) if text.startswith(CLOSE, end) else end
    return Found(start, close, (Candidate(name, arguments, NAME, text[start:close], None, repairs),))


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text

    def _ws(self, k: int) -> int:
        while k < len(self.text) and self.text[k] in " \t\r\n":
            k += 1
        return k

    def value(self, k: int, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise _Unreadable
        k = self._ws(k)
        text = self.text
        if text.startswith(QUOTE, k):
            end = text.find(QUOTE, k + len(QUOTE))
            if end < 0:
                raise _Unreadable
            return text[k + len(QUOTE) : end], end + len(QUOTE)
        if text.startswith('"', k):
            try:
                value, end = json.JSONDecoder().raw_decode(text, k)
            except ValueError as exc:
                raise _Unreadable from exc
            return value, end
        if text.startswith("{", k):
            return self.object(k, depth + 1)
        if text.startswith("[", k):
            return self.array(k, depth + 1)
        end = _WORD.match(text, k).end()  # type: ignore[union-attr]
        word = text[k:end].strip()
        if not word:
            raise _Unreadable
        if word in _LITERALS:
            return _LITERALS[word], end
        if _NUMBER.fullmatch(word):
            return json.loads(word), end
        return word, end  # a bare word: the string it spells

    def object(self, k: int, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        k = self._ws(k + 1)
        if self.text.startswith("}", k):
            return out, k + 1
        while True:
            m = _KEY.match(self.text, k)
            if m is None:
                raise _Unreadable
            value, k = self.value(m.end(), depth)
            out.setdefault(m.group(1) or m.group(2), value)
            k = self._ws(k)
            if self.text.startswith(",", k):
                k += 1
            elif self.text.startswith("}", k):
                return out, k + 1
            else:
                raise _Unreadable

    def array(self, k: int, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        k = self._ws(k + 1)
        if self.text.startswith("]", k):
            return out, k + 1
        while True:
            value, k = self.value(k, depth)
            out.append(value)
            k = self._ws(k)
            if self.text.startswith(",", k):
                k += 1
            elif self.text.startswith("]", k):
                return out, k + 1
            else:
                raise _Unreadable


def _written(value: Any) -> str:
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_written(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_written(v) for v in value) + "]"
    return to_json(value)


def render_call(name: str, arguments: Any) -> str:
    args = as_object(arguments)
    body = _written(args) if isinstance(args, Mapping) else (args if isinstance(args, str) else to_json(args))
    return f"{OPEN}call:{name}{body}{CLOSE}"


CODEC = register(Codec(NAME, find, STARTS, rank=74))
register_format(Format(NAME, NAME, render_call, detect=template_has(OPEN), detect_rank=65))
