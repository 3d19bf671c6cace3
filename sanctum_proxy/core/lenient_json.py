"""One JSON value out of text a model wrote, and where such a value ends.

`decode` tries strict JSON, then lossless rewrite rules, then `json_repair` where it invents nothing; it names the
mends it made.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import json_repair

MAX_DEPTH = 200
# json_repair is slow pure Python: past this only the cheap rules run.
MAX_FALLBACK_CHARS = 16_000
# One answer's calls share this many json_repair characters (`fallback_budget`).
MAX_FALLBACK_PER_ANSWER = 48_000
_FALLBACK_LEFT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("sanctum_json_repair_left",
                                                                                  default=None)
# Past this only strict JSON is read; max_repair_bytes overrides it.
MAX_REPAIR_CHARS = 64 * 1024

_CLOSER = {"{": "}", "[": "]", "(": ")"}


@dataclass(frozen=True)
class Decoded:
    value: Any
    repairs: tuple[str, ...]


@dataclass(frozen=True)
class Undecodable:
    why: str


class _NeedsFallback(Exception):
    """The cheap rules met something they cannot rewrite losslessly."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_STRICT = json.JSONDecoder(parse_constant=_no_constant)


def strict(text: str) -> Any:
    """json.loads that refuses NaN/Infinity, which are not JSON."""
    return _STRICT.decode(text)


def decode(text: str, max_chars: int = MAX_REPAIR_CHARS) -> Decoded | Undecodable:
    """The JSON value in `text` and the mends it took; never raises, and only strict JSON past `max_chars`."""
    try:
        return Decoded(strict(text), ())
    except ValueError:
        pass
    except RecursionError:
        return Undecodable("the JSON is nested too deeply")
    if len(text) > max_chars:
        return Undecodable(f"the text is {len(text)} characters, over the {max_chars} the proxy repairs "
                           "locally (max_repair_bytes)")
    try:
        return _mend(text)
    except RecursionError:
        return Undecodable("the JSON is nested too deeply")


_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n?(.*?)(?:\n?```\s*\Z|\Z)", re.S)


def _mend(text: str) -> Decoded | Undecodable:
    repairs: dict[str, None] = {}
    s = text.strip()
    fence = _FENCE.match(s)
    if fence:
        s = fence.group(1).strip()
        repairs["code_fence"] = None
    first = _first_opener(s)
    if first is None:
        return Undecodable("no JSON object or array found")
    if first > 0:
        repairs["surrounding_text"] = None
        s = s[first:]
    quick = _quick(s, repairs)
    if quick is not None:
        return quick
    try:
        return _finish(_rewrite(s, repairs), repairs)
    except _NeedsFallback:
        return _by_json_repair(s, repairs)


# An optional closing quote keeps an unclosed string from matching at every later quote.
_QUICK = re.compile(r"""("(?:[^"\\]|\\.)*"?)|('(?:[^'\\]|\\.)*)('?)|,(\s*[}\]])|\b(True|False|None)\b""", re.S)


def _quick(s: str, repairs: dict[str, None]) -> Decoded | None:
    """The commonest mends in one cheap regex pass; None when they are not enough."""
    found: dict[str, None] = {}

    def fix(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(1)
        if m.group(2):
            if not m.group(3):
                return m.group()
            found["single_quotes"] = None
            return '"' + m.group(2)[1:].replace("\\'", "'").replace('"', '\\"') + '"'
        if m.group(4) is not None:
            found["trailing_comma"] = None
            return m.group(4)
        found["python_literals"] = None
        return _PY_LITERALS[m.group(5)]

    try:
        value = strict(_QUICK.sub(fix, s))
    except ValueError:
        return None
    repairs.update(found)
    return Decoded(value, tuple(repairs))


def _first_opener(s: str) -> int | None:
    m = re.search(r"[{\[]", s)
    return m.start() if m else None


def _finish(outcome: str | Undecodable, repairs: dict[str, None]) -> Decoded | Undecodable:
    if isinstance(outcome, Undecodable):
        return outcome
    try:
        return Decoded(strict(outcome), tuple(repairs))
    except ValueError as exc:
        raise _NeedsFallback from exc


_TOKEN = re.compile(
    r"""(?P<d>"(?:[^"\\]|\\.)*)(?P<dq>")?
    |(?P<s>'(?:[^'\\]|\\.)*)(?P<sq>')?
    |(?P<c>//[^\n]*|\#[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<p>[{}\[\]:,])
    |(?P<n>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    |(?P<w>[A-Za-z_$][\w$]*)
    |(?P<ws>\s+)
    |(?P<x>.)""",
    re.S | re.X,
)
_COLON_AHEAD = re.compile(r"\s*:")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_JSON_WORDS = frozenset({"true", "false", "null"})


class _Writer:
    """The rewritten text, the open brackets and the mends made so far."""

    def __init__(self, repairs: dict[str, None]) -> None:
        self.out: list[str] = []
        self.stack: list[str] = []
        self.repairs = repairs
        self.comma_at = -1

    def emit(self, tok: str, significant: bool = True) -> None:
        if significant:
            self.comma_at = len(self.out) if tok == "," else -1
        self.out.append(tok)

    def close(self, closer: str) -> None:
        if self.comma_at >= 0:
            self.out[self.comma_at] = ""
            self.repairs["trailing_comma"] = None
        self.stack.pop()
        self.emit(closer)

    def bracket(self, tok: str) -> bool:
        """Handle one bracket; True when the top-level value just closed."""
        if tok in "{[":
            if len(self.stack) >= MAX_DEPTH:
                raise _NeedsFallback
            self.stack.append(tok)
            self.emit(tok)
            return False
        if tok not in (_CLOSER[o] for o in self.stack):
            self.repairs["extra_braces"] = None
            return not self.stack
        while _CLOSER[self.stack[-1]] != tok:
            self.repairs["mismatched_braces"] = None
            self.close(_CLOSER[self.stack[-1]])
        self.close(tok)
        return not self.stack


def _rewrite(s: str, repairs: dict[str, None]) -> str | Undecodable:
    w = _Writer(repairs)
    for m in _TOKEN.finditer(s):
        kind = m.lastgroup
        tok = m.group()
        if kind in ("d", "dq", "s", "sq"):
            quoted = _string(m, repairs)
            if quoted is None:
                return Undecodable("a string value is cut off")
            w.emit(quoted)
        elif kind == "p":
            if tok in ",:":
                w.emit(tok)
            elif w.bracket(tok):
                return _after_value(w, s, m.end())
        elif kind == "n":
            w.emit(tok)
        elif kind == "w":
            w.emit(_word(tok, s, m.end(), repairs))
        elif kind == "c":
            repairs["comments"] = None
        elif kind == "ws":
            w.emit(tok, significant=False)
        else:
            raise _NeedsFallback
    if w.stack:
        repairs["unclosed_braces"] = None
        while w.stack:
            w.close(_CLOSER[w.stack[-1]])
    return "".join(w.out)


def _after_value(w: _Writer, s: str, end: int) -> str | Undecodable:
    body = "".join(w.out)
    rest = s[end:].strip()
    if not rest:
        return body
    if _first_opener(rest) is None:
        w.repairs["extra_braces" if not rest.strip("}]") else "surrounding_text"] = None
        return body
    if len(rest) > 8 * (end + 16):
        return Undecodable("more than one JSON value where one was expected")
    try:
        value = strict(body)
    except ValueError as exc:
        raise _NeedsFallback from exc
    again = decode(rest, len(rest))
    if isinstance(again, Decoded) and again.value == value:
        w.repairs["repeated_arguments"] = None
        return body
    return Undecodable("more than one JSON value where one was expected")


_BAD_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])|\\')
_CONTROL = re.compile(r"[\x00-\x1f]")


def _string(m: re.Match[str], repairs: dict[str, None]) -> str | None:
    """The token as a valid JSON string literal, or None when it is cut off."""
    if m.group("d") is not None:
        if m.group("dq") is None:
            return None
        body = m.group("d")[1:]
    else:
        if m.group("sq") is None:
            return None
        repairs["single_quotes"] = None
        body = m.group("s")[1:].replace("\\'", "'").replace('"', '\\"')
    if "\\" in body:
        fixed = _BAD_ESCAPE.sub(lambda e: e.group() if e.group(1) else "\\\\", body)
        if fixed != body:
            repairs["invalid_escapes"] = None
            body = fixed
    if _CONTROL.search(body):
        repairs["control_characters"] = None
        body = _CONTROL.sub(lambda c: json.dumps(c.group())[1:-1], body)
    return '"' + body + '"'


def _word(tok: str, s: str, end: int, repairs: dict[str, None]) -> str:
    if tok in _JSON_WORDS:
        return tok
    if tok in _PY_LITERALS:
        repairs["python_literals"] = None
        return _PY_LITERALS[tok]
    if _COLON_AHEAD.match(s, end):
        repairs["unquoted_keys"] = None
        return json.dumps(tok)
    raise _NeedsFallback


@contextlib.contextmanager
def fallback_budget(chars: int = MAX_FALLBACK_PER_ANSWER) -> Iterator[None]:
    """Every `decode` inside shares `chars` characters of json_repair."""
    token = _FALLBACK_LEFT.set([chars])
    try:
        yield
    finally:
        _FALLBACK_LEFT.reset(token)


_BRACKETS = re.compile(r"""\"(?:[^"\\]|\\.)*\"?|'(?:[^'\\]|\\.)*'?|[{}\[\]]""", re.S)  # linear: see _QUICK


def _nesting(s: str) -> int:
    """How deep brackets outside strings go (linear; an unclosed bracket counts)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(s):
        tok = m.group()
        if tok in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "}]":
            depth = max(0, depth - 1)
    return deepest


def _by_json_repair(s: str, repairs: dict[str, None]) -> Decoded | Undecodable:
    if len(s) > MAX_FALLBACK_CHARS:
        return Undecodable("the JSON is broken beyond the local rules")
    if _nesting(s) > MAX_DEPTH:  # json_repair recurses per level
        return Undecodable("the JSON is nested too deeply")
    left = _FALLBACK_LEFT.get()
    if left is not None:
        if len(s) > left[0]:
            return Undecodable(f"the answer's broken JSON is over the {MAX_FALLBACK_PER_ANSWER} characters the "
                               "proxy repairs per answer with json_repair")
        left[0] -= len(s)
    try:
        value, log = json_repair.repair_json(s, return_objects=True, logging=True)
    except (ValueError, RecursionError, IndexError, TypeError, AssertionError):  # json_repair asserts on some
        return Undecodable("the JSON could not be repaired")
    if any("closing quote" in str(entry.get("text", "")) for entry in log):
        return Undecodable("a string value is cut off")
    if not isinstance(value, dict | list) or not value:
        return Undecodable("the JSON could not be repaired")
    if _invents(value, s):
        return Undecodable("repairing the JSON would invent values that are not in the text")
    repairs["json_repair"] = None
    return Decoded(value, tuple(repairs))


def _invents(value: Any, text: str) -> bool:
    """True when the repaired value holds a string or null the text lacks."""
    todo: list[Any] = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, str):
            if not v:
                if '""' not in text and "''" not in text:
                    return True
            elif v not in text and json.dumps(v, ensure_ascii=False)[1:-1] not in text:
                return True
        elif v is None and "null" not in text and "None" not in text:
            return True
    return False


SCAN_TOKENS_PER_CHAR = 0.5  # value_end's budget on one text
SCAN_TOKENS_BASE = 100_000
_STRUCTURE = re.compile(r"""[{}\[\]"']""")
_STRUCTURE_PARENS = re.compile(r"""[{}\[\]()"']""")


def value_end(text: str, start: int, *, parens: bool = False) -> int | None:
    """Index just past the bracket closing the one at `start`, or None.

    All calls on one text share a scan budget so many openers stay linear; once spent, no more values are read.
    """
    quotes = _quotes_of(text)
    stack: list[str] = []
    search = (_STRUCTURE_PARENS if parens else _STRUCTURE).search
    pos = start
    while (m := search(text, pos)) is not None:
        quotes.tokens_left -= 1
        if quotes.tokens_left < 0:
            return None  # scan budget spent
        tok = m.group()
        if tok in "\"'":
            close = quotes.close(m.start(), tok)
            if close is None:
                return None  # a quote that never closes
            pos = close + 1
            continue
        pos = m.end()
        if tok in "{[(":
            if len(stack) >= MAX_DEPTH:
                return None
            stack.append(tok)
        elif not stack or _CLOSER[stack.pop()] != tok:
            return None
        if not stack:
            return pos
    return None


_QUOTE = re.compile(r"""["']""")


class _Quotes:
    """Where each string opened at a quote closes, found once per text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._closes: dict[int, int | None] = {}
        self._unclosed_from = {'"': len(text), "'": len(text)}
        self.tokens_left = int(len(text) * SCAN_TOKENS_PER_CHAR) + SCAN_TOKENS_BASE

    def close(self, at: int, quote: str) -> int | None:
        if at in self._closes:
            return self._closes[at]
        if at >= self._unclosed_from[quote]:
            return None
        text, pos, found = self.text, at + 1, None
        while (end := text.find(quote, pos)) >= 0 and self.tokens_left > 0:
            self.tokens_left -= 1  # an escaped quote costs budget too
            run = end
            while run > at + 1 and text[run - 1] == "\\":
                run -= 1
            if (end - run) % 2 == 0:
                found = end
                break
            pos = end + 1
        if found is None and end < 0:
            self._unclosed_from[quote] = min(self._unclosed_from[quote], at)
        self._closes[at] = found
        return found


_LAST = threading.local()


def forget_scans() -> None:
    """Let go of the text the last scans kept (maybe megabytes)."""
    _LAST.quotes = None


def _quotes_of(text: str) -> _Quotes:
    """The text's _Quotes, kept for the next call on the same text."""
    quotes: _Quotes | None = getattr(_LAST, "quotes", None)
    if quotes is None or quotes.text is not text:
        quotes = _LAST.quotes = _Quotes(text)
    return quotes
