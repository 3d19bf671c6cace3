"""JSON calls: fenced ```json blocks, bare JSON objects/arrays in prose, and the call shapes inside them."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import replace
from typing import Any

from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, json_between, register, register_format
from sanctum_proxy.codecs.writing import json_call
from sanctum_proxy.core import loose_json
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.decoded_json import Decoded
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.lenient_json import decode
from sanctum_proxy.core.shapes import JSONValue
from sanctum_proxy.core.tool_names import resolve_name

NAME = "json"
STARTS: tuple[str, ...] = ("```", "{", "[")

MAX_SCAN_CHARS = 1_000_000
MAX_ATTEMPTS = 256
MAX_UNCLOSED = 16
ARG_KEYS = ("arguments", "parameters", "params", "args", "input")
_WRAPPERS = ("tool_calls", "tool_call", "function_call")
# Possessive: `[ \t]*[\w-]*[ \t]*` over a long run of blanks (a call the codecs before blanked out) backtracked
# through every split of it (bench/results/design_costs.md).
_FENCE = re.compile(r"```[ \t]*+[\w-]*+[ \t]*+\n(.*?)(?:```|\Z)", re.S)
_OPEN = re.compile(r"[{\[]")


@functools.lru_cache(maxsize=256)
def _ordered(names: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(names))


def full(found: list[Found]) -> bool:
    """Whether a codec has found as many candidates as one answer may hold."""
    return sum(len(f.candidates) for f in found) >= MAX_CANDIDATES


def known(name: str, names: frozenset[str]) -> bool:
    return name in names or resolve_name(name, _ordered(names))[0] is not None


def candidates(
    payload: str, *, source: str, names: frozenset[str], explicit: bool, repairs: tuple[str, ...] = (),
    whole: bool = True,
) -> list[Candidate] | None:
    """The calls in one JSON payload, read leniently: [] for none, None when it is not JSON."""
    decoded = decode(payload)
    if whole and (not isinstance(decoded, Decoded) or "json_repair" in decoded.repairs):
        opener = len(payload) - len(payload.lstrip())
        loose = loose_json.read(payload, opener, to_end=True)
        if loose is not None:
            decoded = Decoded(loose.value, loose.repairs)
    if not isinstance(decoded, Decoded):
        return None
    found: list[Candidate] = []
    _collect(decoded.value, _Ctx(payload, source, names, explicit, (*repairs, *decoded.repairs)), found, 0)
    return found


class _Ctx:
    __slots__ = ("raw", "source", "names", "explicit", "repairs")

    def __init__(
        self, raw: str, source: str, names: frozenset[str], explicit: bool, repairs: tuple[str, ...]
    ) -> None:
        self.raw, self.source, self.names, self.explicit, self.repairs = raw, source, names, explicit, repairs


def _collect(value: Any, ctx: _Ctx, out: list[Candidate], depth: int, call_id: Any = None) -> None:
    if depth > 4 or len(out) >= MAX_CANDIDATES:
        return
    if isinstance(value, list):
        for item in value:
            _collect(item, ctx, out, depth + 1)
        return
    if not isinstance(value, dict):
        return
    for key in _WRAPPERS:
        if isinstance(value.get(key), list | dict) and len(value) <= 2:
            _collect(value[key], ctx, out, depth + 1)
            return
    if isinstance(value.get("function"), dict):
        _collect(value["function"], ctx, out, depth + 1, value.get("id"))
        return
    call = _call(value, ctx)
    if call is not None:
        name, args = call
        given = call_id if call_id is not None else value.get("id")
        ident = given if isinstance(given, str) and given else None
        out.append(Candidate(name, args, ctx.source, ctx.raw, ident, ctx.repairs))


def _call(d: dict[str, Any], ctx: _Ctx) -> tuple[str, str | dict[str, JSONValue] | None] | None:
    name = d.get("name", d.get("tool_name", d.get("function")))
    arg_key = next((k for k in ARG_KEYS if k in d), None)
    if isinstance(name, str):
        if known(name, ctx.names) or (ctx.explicit and (arg_key is not None or len(d) == 1)):
            return name, _arguments(d.get(arg_key) if arg_key else None)
        return None
    method = d.get("method")
    if isinstance(method, str) and known(method, ctx.names):
        return method, _arguments(d.get("params"))
    if len(d) == 1:
        ((key, args),) = d.items()
        if isinstance(args, dict) and known(key, ctx.names):
            return key, args
    return None


def _arguments(value: Any) -> str | dict[str, JSONValue] | None:
    if value is None or isinstance(value, str | dict):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    text = text[:MAX_SCAN_CHARS]
    found = _fenced(text, tool_names)
    if found:
        masked = list(text)
        for f in found:
            masked[f.start : f.end] = " " * (f.end - f.start)
        text = "".join(masked)
    found.extend(_unwrapped(text, f) for f in bare(text, tool_names, source=NAME))
    return sorted(found, key=lambda f: f.start)


# Tags some fine-tunes and servers wrap a JSON call in (glaive's, LM Studio's): docs/formats.md.
_WRAP_OPEN = re.compile(r"(?:<functioncall>?|\[TOOL_REQUEST\])\s*\Z")
_WRAP_CLOSE = {"<functioncall>": re.compile(r"\s*</functioncall>"),
               "<functioncall": re.compile(r"\s*(?:</functioncall>|>)"),
               "[TOOL_REQUEST]": re.compile(r"\s*\[END_TOOL_REQUEST\]")}


def _unwrapped(text: str, found: Found) -> Found:
    """A call's span widened over the tags around it (the tags are call markup, not content)."""
    opener = _WRAP_OPEN.search(text, max(0, found.start - 64), found.start)
    if opener is None:
        return found
    closer = _WRAP_CLOSE[opener.group().strip()].match(text, found.end)
    return Found(opener.start(), closer.end() if closer else found.end, found.candidates, found.reasoning)


def _fenced(text: str, names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    if "```" not in text:
        return out
    for m in _FENCE.finditer(text):
        inner = bare(m.group(1), names, source=NAME, repairs=("code_fence",))
        calls = tuple(c for f in inner for c in f.candidates)
        if calls:
            out.append(Found(m.start(), m.end(), calls))
    return out


def bare(
    text: str, names: frozenset[str], *, source: str, explicit: bool = False, repairs: tuple[str, ...] = ()
) -> list[Found]:
    """Calls written as JSON values anywhere in `text`: each balanced {...} or [...] that holds one."""
    out: list[Found] = []
    shaped: list[Found] = []
    pos, attempts, unclosed = 0, 0, 0
    while attempts < MAX_ATTEMPTS and unclosed <= MAX_UNCLOSED:
        m = _OPEN.search(text, pos)
        if m is None:
            break
        attempts += 1
        start = m.start()
        end = value_end(text, start)
        calls = None if end is None else candidates(text[start:end], source=source, names=names,
                                                     explicit=explicit, repairs=repairs)
        if end is None and not explicit and _CALL_LIKE.match(text, start):  # a call whose braces never close
            rest = text[start:].rstrip()
            calls = candidates(rest, source=source, names=names, explicit=False, repairs=repairs, whole=False)
            if calls:
                out.append(Found(start, start + len(rest), tuple(calls)))
                break
        if calls is None and not explicit:  # quotes left bare may pair up wrongly, or never close
            found = _unescaped(text, start, names, source, repairs)
            if found is not None:
                out.append(found)
                pos = found.end
                continue
        if end is None:
            unclosed += 1
            pos = start + 1
            continue
        if calls:
            out.append(Found(start, end, tuple(calls)))
        elif calls == [] and _CALL_SHAPED.match(text, start):
            shaped.append(Found(start, end, tuple(candidates(text[start:end], source=source, names=names,
                                                             explicit=True, repairs=repairs) or ())))
        pos = start + 1 if calls is None else end
    out = _in_unclosed_lists(text, out)
    return _beside(text, out, shaped) if out and shaped else out


_LIST_OPEN = re.compile(r"\[\s*\Z")


def _in_unclosed_lists(text: str, out: list[Found]) -> list[Found]:
    """A call right after a `[` that never closes starts at that `[`: the call's markup."""
    for i, f in enumerate(out):
        bracket = _LIST_OPEN.search(text, max(0, f.start - 64), f.start)
        if bracket is not None and value_end(text, bracket.start()) is None:
            out[i] = replace(f, start=bracket.start())
    return out


# `{"name": ..., "arguments"|"parameters": ...}` naming no offered tool: prose, unless it stands in one run of
# calls with a call that names one (`{...}; {...}`): then it is a call too, and repair asks about its name.
_CALL_SHAPED = re.compile(r'\{\s*"name"\s*:\s*"[^"\\\n]{1,256}"\s*,\s*"(?:arguments|parameters)"\s*:')


def _beside(text: str, calls: list[Found], shaped: list[Found]) -> list[Found]:
    """The calls, and the call-shaped objects separated from one of them only by blanks, `;` or `,`."""
    out = list(calls)
    left = [f for f in shaped if f.candidates]
    grew = True
    while grew and left:
        grew = False
        for f in list(left):
            if any(_GAP.fullmatch(text, min(f.end, c.end), max(f.start, c.start)) for c in out):
                out.append(f)
                left.remove(f)
                grew = True
    return sorted(out, key=lambda f: f.start)


# An object that opens like a call or its wrapper (`{"type": "function", ...`, `{"name": ...`).
_CALL_LIKE = re.compile(r'\{\s*"(?:type|name|tool_name|function|tool_calls?)"\s*:')
# A JSON call opening: `{"name": "NAME"` (the name known: checked by the caller).
_CALL_OPEN = re.compile(r'\{\s*"(?:name|tool_name)"\s*:\s*"([^"\\\n]{1,256})"\s*,\s*"')


def _unescaped(text: str, start: int, names: frozenset[str], source: str, repairs: tuple[str, ...]) -> Found | None:
    """A known tool's call that is not JSON: read by loose_json where one reading exists, else kept for tier 2."""
    opening = _CALL_OPEN.match(text, start)
    if opening is None or not known(opening.group(1), names):
        return None
    loose = loose_json.read(text, start)
    if loose is not None:
        calls: list[Candidate] = []
        _collect(loose.value, _Ctx(text[start:loose.end], source, names, False, (*repairs, *loose.repairs)), calls, 0)
        if calls:
            return Found(start, loose.end, tuple(calls))
    end = text.rfind("}") + 1
    raw = text[start:end if end > start else len(text)]
    return Found(start, start + len(raw), (Candidate(opening.group(1), raw, source, raw, None, (*repairs, UNREAD)),))


# The mark of a call `_unescaped` could not read (mend.py reports it as malformed_json).
UNREAD = "unescaped_strings_unread"


_GAP = re.compile(r"[\s;,]*")
_WS = re.compile(r"\s*")


def tagged(
    text: str,
    body: int,
    *,
    closers: tuple[str, ...],
    stops: tuple[str, ...],
    source: str,
    names: frozenset[str],
) -> tuple[int, list[Candidate]]:
    """The JSON calls after a call tag, and where the markup ends; broken JSON runs to the first closer."""
    spans: list[tuple[int, int]] = []
    k = _skip(_WS, text, body)
    while k < len(text) and text[k] in "{[" and len(spans) < MAX_CANDIDATES and not text.startswith(closers, k):
        end = value_end(text, k)
        if end is None:
            break
        spans.append((k, end))
        k = _skip(_GAP, text, end)
    after = _skip(_WS, text, spans[-1][1] if spans else body)
    closer = next((c for c in closers if text.startswith(c, after)), None)
    if spans and (closer or not _closer_ahead(text, after, closers, stops)):
        out: list[Candidate] = []
        for start, end in spans:
            out.extend(_explicit(text[start:end], source, names, ()))
        return (after + len(closer) if closer else spans[-1][1]), out
    return _broken(text, body, closers, stops, source, names)


def _skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    m = pattern.match(text, pos)
    return m.end() if m else pos


def _closer_ahead(text: str, pos: int, closers: tuple[str, ...], stops: tuple[str, ...]) -> bool:
    """Whether a closing tag comes before the next call tag: then what lies between is this call's."""
    stop = min((i for s in stops if (i := text.find(s, pos)) >= 0), default=len(text))
    return any(0 <= text.find(c, pos, stop) for c in closers)


def _broken(
    text: str, body: int, closers: tuple[str, ...], stops: tuple[str, ...], source: str, names: frozenset[str]
) -> tuple[int, list[Candidate]]:
    ends = [(i, len(c)) for c in closers if (i := text.find(c, body)) >= 0]
    ends += [(i, 0) for s in stops if (i := text.find(s, body)) >= 0]
    stop, skip = min(ends) if ends else (len(text), 0)
    payload = text[body:stop].strip()
    return stop + skip, _explicit(payload, source, names, ()) if payload else []


_NAME_GUESS = re.compile(r"""["']name["']\s*:\s*["']([^"'\n]{1,256})["']""")


def _explicit(payload: str, source: str, names: frozenset[str], repairs: tuple[str, ...]) -> list[Candidate]:
    """Calls inside call markup; an unreadable one keeps its text as arguments, for repair to report."""
    calls = candidates(payload, source=source, names=names, explicit=True, repairs=repairs)
    if calls or (calls is not None and payload.strip("[]{} \n\t\r") == ""):
        return calls  # `functools[]`: markup with no call in it
    guess = _NAME_GUESS.search(payload)
    return [Candidate(guess.group(1) if guess else "", payload, source, payload, None, repairs)]


def render_fenced(name: str, arguments: JSONValue) -> str:
    return f"```json\n{json_call(name, arguments)}\n```"


INSTRUCTIONS = (
    "To call a tool, write a fenced JSON block with the keys \"name\" and \"arguments\", for example:\n"
    '```json\n{"name": "%s", "arguments": %s}\n```'
)

# `{`, `[` and a bare fence are prose too: held only as `{"`, `[{` or a fence opening on JSON. Models also
# fence calls as ```json, ```tool_call or ```python, or wrap them in <tools>, <functioncall> or [TOOL_REQUEST].
CODEC = register(Codec(NAME, find, STARTS, rank=130, generic=("{", "[", "```"),
                       shape=r"\{\s*[\"']|\[\s*\{|```[ \t]*\n\s*[\[{]", partial_shape=r"\{\s*|\[\s*|```[ \t]*(\n\s*)?",
                       holds=("<tools>", "```json", "```tool_call", "```python", "<functioncall", "[TOOL_REQUEST]")))
register_format(Format(NAME, NAME, render_fenced, instructions=INSTRUCTIONS, grammar=json_between(render_fenced),
                       as_asked=frozenset({"code_fence"})))  # it asks for the fence
# Constrained rounds: the JSON answer object, without markup (never a `prompt_format`).
register_format(Format("constrained", NAME, json_call, selectable=False))
