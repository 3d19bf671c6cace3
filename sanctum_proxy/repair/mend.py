"""Tier 1: one answer's calls after local, lossless repair and validation.

A valid native call passes untouched (same id, byte-identical arguments, no Repair); `assess` never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from sanctum_proxy.codecs import families, json_blocks
from sanctum_proxy.codecs.base import BARE_COUNTER, MALFORMED, MAX_CANDIDATES, POSITIONAL, SOLE_VALUE
from sanctum_proxy.codecs.registry import TEXT_VALUED, find_calls
from sanctum_proxy.core import loose_json, reasoning
from sanctum_proxy.core.calls import Assessment, Candidate, Found, Problem, Repair, ToolCall, content_text, new_call_id
from sanctum_proxy.core.decoded_json import Decoded
from sanctum_proxy.core.json_fallback import fallback_budget
from sanctum_proxy.core.lenient_json import MAX_REPAIR_CHARS, decode, strict
from sanctum_proxy.core.shapes import ChatMessage, JSONObject, JSONValue
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import coerce

_SEPARATOR = re.compile(r"[\s;,]*")


def assess(
    message: ChatMessage,
    book: Toolbox,
    *,
    finish_reason: str | None = None,
    parallel_tool_calls: bool = True,
    new_id: Callable[[], str] = new_call_id,
    max_repair_chars: int = MAX_REPAIR_CHARS,
    asked_format: str | None = None,
    client_json: bool = False,
) -> Assessment:
    """Every call in the answer, judged.

    A call in `asked_format` is no mend. With `client_json`, JSON content is the client's answer, not calls.
    """
    with fallback_budget():  # the answer's calls share one json_repair budget
        return _assess(message, book, finish_reason == "length", parallel_tool_calls, new_id, max_repair_chars,
                       asked_format, client_json)


def _assess(message: ChatMessage, book: Toolbox, cut: bool, parallel_tool_calls: bool, new_id: Callable[[], str],
            max_repair_chars: int, asked_format: str | None, client_json: bool) -> Assessment:
    msg = message if isinstance(message, dict) else {}
    native = native_candidates(msg.get("tool_calls"))
    text = content_text(msg.get("content"))
    json_answer = client_json and text.lstrip()[:1] in ("{", "[")
    found = calls_outside_reasoning(text, book.name_set) if text and not json_answer else []
    content = strip_calls(text, found)
    candidates = (native + [c for f in found for c in f.candidates])[:MAX_CANDIDATES]
    judge = _Judge(book, cut, new_id, max_repair_chars, asked_format)
    calls: list[ToolCall] = []
    repairs: list[Repair] = []
    problems: list[Problem] = []
    seen: dict[tuple[str, str], tuple[ToolCall, set[str]]] = {}
    duplicates: list[ToolCall] = []
    for cand in candidates:
        verdict = judge(cand)
        problems.extend(verdict.problems)
        if verdict.call is None:
            continue
        kept = _repeated(verdict.call, cand, seen)
        if kept is not None:
            duplicates.append(replace(verdict.call, id=kept.id))
            continue
        calls.append(verdict.call)
        if verdict.repair is not None:
            repairs.append(verdict.repair)
    keep = calls if parallel_tool_calls else calls[:1]
    reasoning = "\n\n".join(f.reasoning for f in found if f.reasoning) or None
    return Assessment(tuple(keep), content, tuple(repairs), tuple(problems), tuple(calls[len(keep) :]), reasoning,
                      tuple(duplicates))


def calls_outside_reasoning(text: str, tool_names: frozenset[str]) -> list[Found]:
    """Call markup outside reasoning spans: thinking about a call makes none."""
    pieces = reasoning.outside(text)
    if pieces == [(0, len(text))]:
        return find_calls(text, tool_names)
    whole = find_calls(text, tool_names)
    calls = [(f.start, f.end) for f in whole if f.candidates]
    if calls:
        pieces = reasoning.outside(text, skip=lambda at: any(start < at < end for start, end in calls))
        if pieces == [(0, len(text))]:
            return whole
    found: list[Found] = []
    for start, end in pieces:
        found += [replace(f, start=f.start + start, end=f.end + start)
                  for f in find_calls(text[start:end], tool_names)]
    return found


def _repeated(call: ToolCall, cand: Candidate, seen: dict[tuple[str, str], tuple[ToolCall, set[str]]]
              ) -> ToolCall | None:
    """The earlier call a content call repeats written another way (a native call a server echoes, a tagged call
    written again bare): it is dropped. The same call twice in one format is two calls (a model may mean both)."""
    first = seen.setdefault((call.name, _canonical(call.arguments)), (call, set()))
    if cand.source != "native" and first[1] and cand.source not in first[1]:
        return first[0]
    first[1].add(cand.source)
    return None


def _canonical(arguments: str) -> str:
    """Arguments as compared for repeats: a native call's spacing is not what the echo of it has."""
    try:
        return orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, TypeError):
        return arguments


def strip_calls(text: str, found: list[Found]) -> str | None:
    """The text without call markup; None when only whitespace is left."""
    if not found:
        return text if text.strip() else None
    pieces: list[str] = []
    pos = 0
    for i, f in enumerate(found):
        gap = text[pos : f.start]
        if not (i and _SEPARATOR.fullmatch(gap)):  # a separator between calls goes with them
            pieces.append(gap)
        pos = f.end
    pieces.append(text[pos:])
    rest = "".join(pieces).rstrip()  # leading whitespace stays: the stream showed it
    return rest or None


def native_candidates(tool_calls: JSONValue) -> list[Candidate]:
    if not isinstance(tool_calls, list):
        return []
    return [_native(item) for item in tool_calls[:MAX_CANDIDATES]]


def _native(item: JSONValue) -> Candidate:
    d = item if isinstance(item, dict) else {}
    fn: JSONObject = d["function"] if isinstance(d.get("function"), dict) else {}
    name = fn.get("name")
    args = fn.get("arguments")
    if args is not None and not isinstance(args, str | dict):
        args = _dumps(args, pretty=True)
    ident = d.get("id")
    return Candidate(
        name=name if isinstance(name, str) else "",
        arguments=args,
        source="native",
        raw=native_call_text(item),
        id=ident if isinstance(ident, str) and ident else None,
    )


BIG_RAW_CHARS = 1024 * 1024


def native_call_text(item: JSONValue) -> str:
    """A native call as the JSON it came in."""
    fn = item.get("function") if isinstance(item, dict) else None
    args = fn.get("arguments") if isinstance(fn, dict) else None
    if isinstance(args, str) and len(args) > BIG_RAW_CHARS:  # orjson reserves bytes per character
        return json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=repr)
    try:
        return orjson.dumps(item).decode()
    except (TypeError, orjson.JSONEncodeError):
        return _dumps(item, pretty=True) or repr(item)[:10_000]


def _dumps(value: JSONValue, *, pretty: bool = False) -> str:
    try:
        if pretty:
            return json.dumps(value, ensure_ascii=False)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return ""


@dataclass(frozen=True)
class _Verdict:
    call: ToolCall | None = None
    repair: Repair | None = None
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class _Args:
    value: Any
    repairs: tuple[str, ...]
    unchanged: bool  # the model's arguments text can go out as it is


class _Judge:
    def __init__(self, book: Toolbox, truncated: bool, new_id: Callable[[], str], max_chars: int,
                 asked: str | None) -> None:
        self.book, self.truncated, self.new_id = book, truncated, new_id
        self.max_chars = max_chars
        self.asked: str | None = None
        self.as_asked: frozenset[str] = frozenset()
        if asked:
            self.asked, self.as_asked = families.as_asked(asked)

    def __call__(self, cand: Candidate) -> _Verdict:
        name, name_repairs = self.book.resolve(cand.name)
        if name is None and BARE_COUNTER in cand.repairs:
            name = self.book.by_keys(cand.arguments)
        if name is None:
            split = _arguments_in_name(cand, self.book)
            if split is not None:
                cand, (name, name_repairs) = split, self.book.resolve(split.name)
        if name is None and not cand.name and isinstance(cand.arguments, str):
            decoded = decode(cand.arguments, self.max_chars)
            if not isinstance(decoded, Decoded):  # markup around text that is no call
                return _Verdict(problems=(self._malformed(cand, None, decoded.why),))
        if name is None:
            detail = f"there is no tool named {cand.name!r}"
            return _Verdict(problems=(Problem("unknown_spell", cand.name, (detail,), cand.raw),))
        if POSITIONAL in cand.repairs:
            cand = replace(cand, arguments=self.book.by_position(name, cand.arguments) or cand.arguments)
        if SOLE_VALUE in cand.repairs:
            sole = self.book.sole_value(name, cand.arguments)
            if sole is None:
                detail = f"{name} takes more than one text value: write its arguments as JSON"
                return _Verdict(problems=(Problem("invalid_arguments", name, (detail,), cand.raw),))
            cand = replace(cand, arguments=sole)
        args = self._arguments(cand)
        if isinstance(args, Problem):
            return _Verdict(problems=(replace(args, tool=name),))
        value, coerced = args.value, tuple[str, ...]()
        problems = self.book.check(name, value)
        as_text = isinstance(cand.arguments, dict) and cand.source in TEXT_VALUED
        if (problems or as_text) and isinstance(value, dict):  # text values are typed even where text fits
            value, coerced = coerce(value, self.book.tools[name].parameters, as_text=as_text)
            problems = self.book.check(name, value) if coerced or value != args.value else problems
        if problems:
            return _Verdict(problems=tuple(replace(p, raw=cand.raw) for p in problems))
        return self._accept(cand, name, value, (*name_repairs, *args.repairs, *coerced), args.unchanged)

    def _accept(
        self, cand: Candidate, name: str, value: Any, repairs: tuple[str, ...], unchanged: bool
    ) -> _Verdict:
        if cand.source == self.asked:
            repairs = tuple(r for r in repairs if r not in self.as_asked)
        elif cand.source != "native":
            repairs = (f"{cand.source}_in_content", *repairs)
        if unchanged and isinstance(cand.arguments, str) and not set(repairs) - _NAME_ONLY:
            text = cand.arguments
        else:
            text = _dumps(value)
            if not text:
                why = "the arguments cannot be written as JSON"
                return _Verdict(problems=(self._malformed(cand, name, why),))
        call = ToolCall(cand.id or self.new_id(), name, text)
        repair = Repair(name, call.id, tuple(dict.fromkeys(repairs)), cand.raw) if repairs else None
        return _Verdict(call=call, repair=repair)

    def _arguments(self, cand: Candidate) -> _Args | Problem:
        args, codec_repairs = cand.arguments, cand.repairs
        if json_blocks.UNREAD in codec_repairs:
            why = ("the answer was cut off by max_tokens" if self.truncated else
                   "a string holds quotes or line breaks that are not escaped, and the call can be read more than "
                   "one way")
            return self._malformed(cand, cand.name, why)
        if self.truncated and {"unclosed_braces", "unclosed_tag", "unclosed_at_end"} & set(codec_repairs):
            return self._malformed(cand, cand.name, "the answer was cut off by max_tokens")
        if isinstance(args, dict):
            extra = ("arguments_object",) if cand.source == "native" else ()
            return _Args(args, (*codec_repairs, *extra), False)
        if args is None or not args.strip():
            return _Args({}, (*codec_repairs, "empty_arguments"), False)
        try:
            value = strict(args)
        except (ValueError, RecursionError):
            return self._mend_text(cand, args, codec_repairs)
        if isinstance(value, str):
            return self._mend_text(cand, args, codec_repairs)
        return _Args(value, codec_repairs, not codec_repairs)

    def _mend_text(self, cand: Candidate, args: str, codec_repairs: tuple[str, ...]) -> _Args | Problem:
        decoded = decode(args, self.max_chars)
        if (not isinstance(decoded, Decoded) or "json_repair" in decoded.repairs) and len(args) <= self.max_chars:
            loose = loose_json.read(args, len(args) - len(args.lstrip()), to_end=True)  # bare quotes, raw newlines
            decoded = Decoded(loose.value, loose.repairs) if loose is not None else decoded
        if not isinstance(decoded, Decoded):
            return self._malformed(cand, cand.name, decoded.why)
        if self.truncated and "unclosed_braces" in decoded.repairs:
            return self._malformed(cand, cand.name, "the answer was cut off by max_tokens")
        value, repairs = decoded.value, (MALFORMED, *codec_repairs, *decoded.repairs)
        if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
            inner = decode(value, self.max_chars)
            if isinstance(inner, Decoded):
                value, repairs = inner.value, (*repairs, "double_encoded", *inner.repairs)
        return _Args(value, repairs, False)

    def _malformed(self, cand: Candidate, name: str | None, why: str) -> Problem:
        return Problem("malformed_json", name, (why,), cand.raw)


def _arguments_in_name(cand: Candidate, book: Toolbox) -> Candidate | None:
    """A call with its arguments in its name (`get_weather{"city": "Paris"}`), split."""
    head, brace, tail = cand.name.partition("{")
    empty = cand.arguments is None or cand.arguments in ("", {}) or \
        (isinstance(cand.arguments, str) and cand.arguments.strip() in ("", "{}"))
    if not brace or not empty or book.resolve(head.strip())[0] is None:
        return None
    return replace(cand, name=head.strip(), arguments=brace + tail, repairs=(*cand.repairs, "arguments_in_name"))


# Name-only mends: the arguments text still goes out byte-identical.
_NAME_ONLY = frozenset({"name_case", "name_prefix", "name_whitespace", "name_repeated", "name_namespace",
                        "name_special_tokens"})
