"""One JSON value out of text a model wrote: strict JSON, then lossless rewrite rules, then the json_repair fallback.

`decode` names the mends it made and invents nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sanctum_proxy.core.decoded_json import CLOSER, MAX_DEPTH, Decoded, Undecodable
from sanctum_proxy.core.json_fallback import by_json_repair

# Past this only strict JSON is read; max_repair_bytes overrides it.
MAX_REPAIR_CHARS = 64 * 1024


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
        return by_json_repair(s, repairs)


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
        if tok not in (CLOSER[o] for o in self.stack):
            self.repairs["extra_braces"] = None
            return not self.stack
        while CLOSER[self.stack[-1]] != tok:
            self.repairs["mismatched_braces"] = None
            self.close(CLOSER[self.stack[-1]])
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
            w.close(CLOSER[w.stack[-1]])
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
