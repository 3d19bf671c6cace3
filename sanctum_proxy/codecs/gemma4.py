"""Gemma 4 calls: `call:NAME{...}` between its special tokens, strings quoted with the `<|"|>` token:

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

as its chat template writes them (llama.cpp `models/templates/gemma4.jinja`: keys bare, sorted; strings
`<|"|>...<|"|>`, numbers and true/false bare, objects `{k:v}`, lists `[...]`); a tool result is
`<|tool_response>response:NAME{value:...}<tool_response|>`. What servers pass on besides (oMLX, mlx-lm,
vLLM without a Gemma 4 parser): strings in ASCII quotes (`{command:"ls"}`), and, when the server stripped
the special tokens, `call:NAME{content:hello,path:a.txt}` with no marker and no quotes at all.

Inside `<|tool_call>` any name counts, and arguments that do not read go on as written (repair asks again);
without the marker a call is one only when it names an offered tool, its arguments read whole and it starts
or ends its line, so prose that mentions `call:` stays prose. An unquoted value runs to the next `,key:` or
the closing bracket; it is a number or true/false/null when it reads as one, else a string. `(...)` for
`{...}` is read too. Gemma 4 also writes positional arguments (ollama/ollama#18275): `call:NAME:` then
`BEGIN_ARG:\nvalue\nEND_ARG` blocks, empty thought channels strewn inside; the judge names them in the order of
the tool's properties (POSITIONAL).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import (
    MAX_CANDIDATES,
    POSITIONAL,
    Codec,
    Format,
    Scanner,
    register,
    register_format,
    template_has,
)
from sanctum_proxy.codecs.writing import as_object
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "gemma4"
OPEN = "<|tool_call>"
CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
STARTS: tuple[str, ...] = (OPEN, "call:")
MAX_DEPTH = 64
MAX_MEMBERS = 4096  # members of one object or list (past it the arguments are unread)
# The steps (values, and stops inside unquoted ones) one text's reading may take: a text of openers whose
# values never close (`call:f{a:b,` a hundred thousand times) costs this much, not openers x text.
MAX_STEPS = 100_000
# After the marker: `call:NAME` (a bare `:NAME` too, vLLM #53431), then the arguments' bracket.
_HEAD = re.compile(r"\s*(?:call)?:\s*([A-Za-z_][\w.\-]{0,255})\s*([{(])")
# Without it: `call:NAME{` at the start of a line or after a space (never inside a word: `recall:x{`).
_BARE_HEAD = re.compile(r"(?<![\w.\-])call:([A-Za-z_][\w.\-]{0,255})\{")
# A call without the marker starts its line or ends it (only blanks between it and the line's edge).
_LINE_END = re.compile(r"[ \t]*(?:\n|\Z)")
_KEY = re.compile(r"\s*(?:<\|\"\|>([^<]{1,256}?)<\|\"\|>|\"([^\"\\\n]{1,256})\"|([A-Za-z_$][\w.\-$]{0,255}))\s*:")
_NEXT_KEY = re.compile(r",\s*(?:<\|\"\|>|\"?[A-Za-z_$][\w.\-$]{0,255}\"?\s*:)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_SPACE = re.compile(r"\s+")
_STOP = re.compile(r"[,}\])<]")
_ASCII_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_LITERALS: dict[str, JSONValue] = {"true": True, "false": False, "null": None, "True": True, "False": False,
                             "None": None}
_CLOSER = {"{": "}", "(": ")"}
_TRAIL = re.compile(r"\s*" + re.escape(CLOSE))
# Positional arguments: `call:NAME:` then `BEGIN_ARG:` blocks; empty thought channels between are noise.
_POSITIONAL_HEAD = re.compile(r"\s*(?:call)?:\s*([A-Za-z_][\w.\-]{0,255}):?\s*(?=BEGIN_ARG\b)")
_EMPTY_THOUGHT = re.compile(r"<\|channel>(?:thought)?\s*<channel\|>")
_ARG = re.compile(r"\s*BEGIN_ARG:?[ \t]*\n?(.*?)\n?[ \t]*END_ARG\b", re.S)
_UNCLOSED_ARG = re.compile(r"\s*BEGIN_ARG:?[ \t]*\n?")
_ARG_NOISE = re.compile(r"(?:\s*<\|channel>(?:thought)?\s*<channel\|>)*")


class _Unread(Exception):
    """The arguments do not read as Gemma 4 values."""


class _Reader:
    """A recursive-descent reader of Gemma 4 values over one text, from a position on (each character read
    once: linear)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.bare = False  # an unquoted string was read (the server stripped the quote tokens)
        self._stop = (-1, -1)  # the last stop search: (searched from, found at or len(text))
        self.steps = MAX_STEPS

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise _Unread

    def next_stop(self, j: int) -> int:
        """Where the next `,}])<` at or after j is (len(text) when none): a search is reused while j has
        not passed what it found, so unclosed values from many openers never rescan the rest of the text."""
        start, at = self._stop
        if not start <= j <= at:
            m = _STOP.search(self.text, j)
            at = m.start() if m else len(self.text)
            self._stop = (j, at)
        return at

    def skip(self, k: int) -> int:
        m = _SPACE.match(self.text, k)
        return m.end() if m else k

    def members(self, k: int, closer: str, depth: int) -> tuple[dict[str, JSONValue], int]:
        """`key:value,...` up to `closer`, from k (after the opener); the end is after the closer."""
        if depth > MAX_DEPTH:
            raise _Unread
        out: dict[str, JSONValue] = {}
        k = self.skip(k)
        if self.text.startswith(closer, k):
            return out, k + 1
        for _ in range(MAX_MEMBERS):
            key = _KEY.match(self.text, k)
            if key is None:
                raise _Unread
            value, k = self.value(key.end(), f",{closer}", depth)
            out.setdefault(next(g for g in key.groups() if g is not None).strip(), value)
            k = self.skip(k)
            if self.text.startswith(closer, k):
                return out, k + 1
            if not self.text.startswith(",", k):
                raise _Unread
            k += 1
        raise _Unread

    def items(self, k: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_DEPTH:
            raise _Unread
        out: list[Any] = []
        k = self.skip(k)
        if self.text.startswith("]", k):
            return out, k + 1
        for _ in range(MAX_MEMBERS):
            value, k = self.value(k, ",]", depth)
            out.append(value)
            k = self.skip(k)
            if self.text.startswith("]", k):
                return out, k + 1
            if not self.text.startswith(",", k):
                raise _Unread
            k += 1
        raise _Unread

    def value(self, k: int, stops: str, depth: int) -> tuple[Any, int]:
        text = self.text
        self.step()
        k = self.skip(k)
        if text.startswith(QUOTE, k):
            end = text.find(QUOTE, k + len(QUOTE))
            if end < 0:
                raise _Unread
            return text[k + len(QUOTE) : end], end + len(QUOTE)
        if text.startswith('"', k):
            return self.ascii_string(k)
        if text.startswith("{", k):
            return self.members(k + 1, "}", depth + 1)
        if text.startswith("[", k):
            return self.items(k + 1, depth + 1)
        return self.word(k, stops)

    def ascii_string(self, k: int) -> tuple[str, int]:
        """A string in ASCII double quotes, JSON escapes read."""
        m = _ASCII_STRING.match(self.text, k)
        if m is None:
            raise _Unread
        try:
            return str(json.loads(m.group())), m.end()
        except ValueError:
            return m.group()[1:-1], m.end()

    def word(self, k: int, stops: str) -> tuple[Any, int]:
        """An unquoted value: to the next `,key:` inside an object (a comma in a stripped string stays in
        it), to the next comma in a list, or to the closing bracket."""
        text = self.text
        j = k
        while True:
            self.step()
            j = self.next_stop(j)
            if j >= len(text):
                raise _Unread
            c = text[j]
            if c in stops and (c != "," or "]" in stops or _NEXT_KEY.match(text, j)):
                break
            if c == "<" and text.startswith((CLOSE, OPEN), j):
                raise _Unread
            j += 1
        word = text[k:j].strip()
        if not word:
            raise _Unread
        if word in _LITERALS:
            return _LITERALS[word], j
        if _NUMBER.match(word):
            return json.loads(word), j
        self.bare = True
        return word, j


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    reader = _Reader(text)
    scan = Scanner(text)  # the reader only moves forward: each marker looked for about once
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        if json_blocks.full(out) or reader.steps < 0:
            break
        marked = scan.find(OPEN, pos)
        bare = _BARE_HEAD.search(text, pos, marked if marked >= 0 else len(text))
        if bare is not None:
            found = _bare(reader, bare, tool_names)
            if found is not None:
                out.append(found)
            pos = found.end if found is not None else bare.end()
        elif marked >= 0:
            found = _marked(reader, scan, marked)
            out.append(found)
            pos = found.end
        else:
            break
    return out


def _bare(reader: _Reader, m: re.Match[str], names: frozenset[str]) -> Found | None:
    """A call without the marker: a known name, and arguments that read to their closing brace."""
    if not json_blocks.known(m.group(1), names):
        return None
    try:
        args, end = reader.members(m.end(), "}", 0)
    except _Unread:
        reader.bare = False
        return None
    repairs = ("unquoted_strings",) if reader.bare else ()
    reader.bare = False
    text = reader.text
    close = _TRAIL.match(text, end)
    end = close.end() if close else end
    if not (_starts_line(text, m.start()) or _LINE_END.match(text, end)):
        return None  # inside a sentence ("You can call:bash{command:ls} if you like."): prose
    return Found(m.start(), end, (Candidate(m.group(1), args, NAME, text[m.start() : end], None, repairs),))


def _starts_line(text: str, k: int) -> bool:
    """Whether only blanks stand between k and the start of its line (each call's own blanks: linear)."""
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    return k == 0 or text[k - 1] == "\n"


def _marked(reader: _Reader, scan: Scanner, start: int) -> Found:
    """`<|tool_call>` and the calls up to its `<tool_call|>` (or the next marker, or the end): each one read,
    or the rest of the block kept as its arguments (repair reports it). An empty block is markup."""
    text = reader.text
    body = start + len(OPEN)
    close, nxt = scan.find(CLOSE, body), scan.find(OPEN, body)
    limit = min(i for i in (close, nxt, len(text)) if i >= 0)
    calls: list[Candidate] = []
    k = body
    while len(calls) < MAX_CANDIDATES:
        head = _HEAD.match(text, k, limit)
        if head is None:
            positional = _positional(text, k, limit, start)
            if positional is not None:
                calls.append(positional[0])
                k = positional[1]
            break
        name, opener = head.group(1), head.group(2)
        try:
            args, end = reader.members(head.end(), _CLOSER[opener], 0)
            if end > limit:
                raise _Unread
        except _Unread:
            reader.bare = False
            payload = text[head.end() - 1 : limit].strip()
            calls.append(Candidate(name, payload, NAME, text[start:limit], None, ("unreadable_arguments",)))
            k = limit
            break
        repairs = ("unquoted_strings",) if reader.bare else ()
        reader.bare = False
        calls.append(Candidate(name, args, NAME, text[start:end], None, repairs))
        k = end
    if not calls:  # no `call:NAME{`: JSON written between the tokens, or text repair asks about
        end, found = json_blocks.tagged(text, body, closers=(CLOSE,), stops=(OPEN,), source=NAME,
                                        names=frozenset())
        return Found(start, max(end, body), tuple(found))
    if close == limit and not text[k:close].strip():
        return Found(start, close + len(CLOSE), tuple(calls))
    return Found(start, max(k, body), tuple(calls))


def _positional(text: str, k: int, limit: int, start: int) -> tuple[Candidate, int] | None:
    """`call:NAME:` and its `BEGIN_ARG` blocks from k: the values as a JSON list, and where they end."""
    head = _POSITIONAL_HEAD.match(text, k, limit)
    if head is None:
        return None
    values: list[JSONValue] = []
    end = head.end()
    while (arg := _ARG.match(text, end, limit)) is not None and len(values) < MAX_MEMBERS:
        values.append(_EMPTY_THOUGHT.sub("", arg.group(1)))
        noise = _ARG_NOISE.match(text, arg.end(), limit)
        end = noise.end() if noise else arg.end()
    repairs: tuple[str, ...] = (POSITIONAL,)
    unclosed = _UNCLOSED_ARG.match(text, end, limit)
    if unclosed is not None:  # its END_ARG never came: the value runs to the end (cut: repair asks again)
        values.append(_EMPTY_THOUGHT.sub("", text[unclosed.end() : limit]).rstrip())
        repairs, end = (POSITIONAL, "unclosed_tag"), limit
    if not values:
        payload = text[head.end() : limit].strip()
        return Candidate(head.group(1), payload, NAME, text[start:limit], None, ("unreadable_arguments",)), limit
    return Candidate(head.group(1), json.dumps(values), NAME, text[start:end], None, repairs), end


def format_value(value: JSONValue) -> str:
    """One value as the template's `format_argument` writes it (keys bare, sorted)."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return "null" if value is None else json.dumps(value)


def render_call(name: str, arguments: JSONValue) -> str:
    args = as_object(arguments)
    if isinstance(args, dict):
        body = format_value(args)[1:-1]
    else:  # broken JSON from an earlier turn: as written (the template writes a string argument so too)
        body = str(args)
    return f"{OPEN}call:{name}{{{body}}}{CLOSE}"


def render_result(name: str, call_id: str, text: str) -> str:
    return f"<|tool_response>response:{name}{{value:{QUOTE}{text}{QUOTE}}}<tool_response|>"


# `call:` is prose too: held while streaming only as `call:NAME{`.
CODEC = register(Codec(NAME, find, STARTS, rank=35, generic=("call:",), shape=r"(?<![\w.\-])call:[A-Za-z_][\w.\-]*\{",
                       partial_shape=r"c(?:a(?:l(?:l(?::[A-Za-z_]?[\w.\-]*)?)?)?)?"))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has("<|tool_call>call:"),
                       detect_rank=25))
