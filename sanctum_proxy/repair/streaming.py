"""Incremental assembler: releases streamed content that cannot start a call, holds the rest (pure)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import cast

from sanctum_proxy.codecs import job_lines
from sanctum_proxy.codecs.registry import stream_lead, stream_shapes, stream_starts
from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.shapes import AnswerMeta, ChatMessage, JSONObject, JSONValue, Usage, answer_meta
from sanctum_proxy.repair import constrain

_CHUNK_OWN = frozenset({"id", "object", "created", "model", "system_fingerprint", "choices", "usage", "sanctum"})
# Delta text fields never read for calls: passed on live.
PASSED = (*reasoning.FIELDS, "refusal")
STARTS = stream_starts()
_OPENER, _PARTIAL_OPENER, _GENERIC_FIRSTS = stream_shapes()
# Gemma 4's `call:NAME{` with a name of up to 256 characters.
_SHAPE_REACH = len("call:") + 256
_LINE_REACH = 256 + 72
_LEAD_PARTIAL, _LEAD_TEXT, _LEAD_CALL = stream_lead()
_FIRST_WORD = re.compile(r"\s*([A-Za-z_][\w.\-]{0,255})")
_BLANKS = re.compile(r"\s*")
_WORD_REST = re.compile(r"[\w.\-]*")
_WORD_START = re.compile(r"[A-Za-z_]")
_MAX_WORD = 256


@dataclass
class _LeadScan:
    """The answer's first line (blanks, word, blanks), scanned once per character rather than per delta."""

    word: list[str] = field(default_factory=list)
    phase: str = "blank"  # blank, word, after
    broken: bool = False
    newline: bool = False
    beyond: bool = False
    length: int = 0

    def feed(self, text: str) -> None:
        while text and not self.broken:
            if self.phase == "word":
                grown = _WORD_REST.match(text).end()  # type: ignore[union-attr]
                self.word.append(text[:grown])
                self.length += grown
                text = text[grown:]
                if self.length > _MAX_WORD:
                    self.broken = self.beyond = True
                elif text:
                    self.phase = "after"
                continue
            blank = _BLANKS.match(text).end()  # type: ignore[union-attr]
            self.newline = self.newline or "\n" in text[:blank]
            if self.phase == "after" and text[:blank].strip(" \t"):
                self.beyond = True
            text = text[blank:]
            if not text:
                break
            if self.phase == "after" or not _WORD_START.match(text):
                self.broken = True
            else:
                self.phase = "word"

    def may_name(self, names: frozenset[str]) -> bool:
        """Whether the first word is, or may grow into, one of `names`."""
        if self.phase == "blank":
            return True
        first = "".join(self.word)[:_MAX_WORD].lower()
        if self.beyond or self.newline:
            return first in {n.lower() for n in names}
        return any(n.lower().startswith(first) for n in names)


def with_tools(names: frozenset[str] | set[str]) -> tuple[str, ...]:
    """The starts a round with these tools holds at: the codecs' plus each tool's `NAME(`."""
    return STARTS + tuple(f"{name}(" for name in sorted(names)) + job_lines.stream_starts(frozenset(names))


@dataclass(frozen=True)
class _Delimiters:
    """Starts precompiled for the per-chunk hold-back."""

    pattern: re.Pattern[str]
    prefixes: frozenset[str]
    firsts: frozenset[str]
    longest: int


@functools.lru_cache(maxsize=64)
def _delimiters_of(starts: tuple[str, ...]) -> _Delimiters:
    starts = tuple(s for s in starts if s)
    return _Delimiters(re.compile("|".join(re.escape(s) for s in starts) or "(?!)"),
                       frozenset(s[:i] for s in starts for i in range(1, len(s) + 1)),
                       frozenset(s[0] for s in starts) | _GENERIC_FIRSTS,
                       max(max(map(len, starts), default=0), _SHAPE_REACH))


def _joined(parts: list[str]) -> str:
    """The parts joined and kept as one part: `str +=` on an attribute is quadratic."""
    if len(parts) > 1:
        parts[:] = ["".join(parts)]
    return parts[0] if parts else ""


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    parts: list[str] = field(default_factory=list)
    object_arguments: dict[str, JSONValue] | None = None

    @property
    def arguments(self) -> str:
        return _joined(self.parts)


@dataclass
class Assembler:
    starts: tuple[str, ...] = STARTS
    released: int = 0
    holding: bool = False
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None
    meta: AnswerMeta = field(default_factory=lambda: AnswerMeta())
    extra: JSONObject = field(default_factory=dict)
    _delimiters: _Delimiters | None = None
    text_branch: bool = False  # constrained round: show only the answer object's text branch
    _branch: constrain.TextBranch = field(default_factory=constrain.TextBranch)
    _fresh: str = ""
    lead: bool = False  # the prompt ends with Functionary v3.2's `>>>`
    names: frozenset[str] = frozenset()
    _led: bool = False
    client_json: bool = False  # response_format JSON: a JSON answer flows, never held
    _json_answer: bool | None = None
    _parts: list[str] = field(default_factory=list)
    _pending_parts: list[str] = field(default_factory=list)  # content[released:] while nothing is held
    _grew: str = ""
    _scan: _LeadScan = field(default_factory=_LeadScan)
    _closer: str = ""  # the closer ending reasoning markup we are inside
    _reasoned: bool = False
    _unhold: bool = False  # a lone closer showed held content was reasoning
    _tail: str = ""  # for a closer split across deltas
    _logprobs: list[JSONValue] = field(default_factory=list)
    _passed: dict[str, list[str]] = field(default_factory=dict)
    _live_passed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def content(self) -> str:
        return _joined(self._parts)

    @property
    def _pending(self) -> str:
        return _joined(self._pending_parts)

    @_pending.setter
    def _pending(self, text: str) -> None:
        self._pending_parts[:] = [text] if text else []

    def feed(self, chunk: JSONObject) -> str:
        """Take one upstream chunk; return the content that may be shown now ("" for none)."""
        if not self.meta:
            self.meta = answer_meta(chunk)
        elif not self.meta.get("system_fingerprint") and chunk.get("system_fingerprint"):
            self.meta["system_fingerprint"] = cast("str", chunk["system_fingerprint"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = cast("Usage", usage)
        for key, value in chunk.items():
            if key not in _CHUNK_OWN:  # vendor fields: keep the latest
                self.extra[key] = value
        listed = chunk.get("choices")
        for choice in listed if isinstance(listed, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
                self._logprobs += logprobs["content"]
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._parts.append(delta["content"])
                if self.text_branch:
                    self._fresh += delta["content"]
                elif not self.holding:
                    self._pending_parts.append(delta["content"])
                    self._grew += delta["content"]
                elif not self._reasoned:
                    window = self._tail + delta["content"]
                    self._unhold = self._unhold or reasoning.first_orphan_closer(window) is not None
                self._tail = (self._tail + delta["content"])[-reasoning.LONGEST:]
            for name in PASSED:
                if isinstance(delta.get(name), str) and delta[name]:
                    self._passed.setdefault(name, []).append(delta[name])
                    self._live_passed.setdefault(name, []).append(delta[name])
            for call in delta.get("tool_calls") or []:
                self._add_call(call)
        try:
            return self._release()
        finally:
            self._grew = ""

    def take_logprobs(self) -> JSONObject | None:
        """The logprobs fed since the last release, to go with the text released now."""
        if not self._logprobs:
            return None
        out: JSONObject = {"content": self._logprobs, "refusal": None}
        self._logprobs = []
        return out

    def take_passed(self) -> dict[str, str]:
        """The PASSED fields' text fed since the last call, by field."""
        out = {name: "".join(parts) for name, parts in self._live_passed.items()}
        self._live_passed.clear()
        return out

    def _add_call(self, delta: JSONObject) -> None:
        index = delta.get("index", len(self.calls))
        call = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), _Call())
        if delta.get("id"):
            call.id = str(delta["id"])
        function = delta.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name:
            # llama.cpp re-sends the full name as it grows.
            call.name = name if name.startswith(call.name) or not call.name else call.name + name
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            call.object_arguments = arguments
        elif isinstance(arguments, str):
            call.parts.append(arguments)

    def _release(self) -> str:
        if self.text_branch:
            fresh, self._fresh = self._fresh, ""
            return self._branch.feed(fresh)
        if self.client_json and self._json_answer is None and self._grew.strip():
            self._json_answer = self._pending.lstrip()[:1] in ("{", "[")
        if self._json_answer:
            out, self._pending, self.released = self._pending, "", self.released + len(self._pending)
            return out
        if self.holding and not self._unheld():
            return ""
        if not self._led and not self._lead():
            return ""
        text = self._pending  # positions relative to `released`
        pos = 0
        while True:
            if self._closer:  # reasoning flows on, never held
                at = text.find(self._closer, pos)
                if at >= 0:
                    pos, self._closer = at + len(self._closer), ""
                    continue
                pos += reasoning.partial_marker(text[pos:], (self._closer,))
                break
            rest = text[pos:]
            opener = reasoning.OPENER.search(rest)
            limit = opener.start() if opener else len(rest)
            orphan = None if self._reasoned else reasoning.first_orphan_closer(rest[:limit])
            if orphan is not None:  # reasoning begun in the prompt ends
                pos, self._reasoned = pos + orphan, True
                continue
            call = self._call_start(rest, at_start=self.released + pos == 0)
            if opener and (call is None or opener.start() <= call):
                pos, self._closer, self._reasoned = pos + opener.end(), reasoning.CLOSER_OF[opener.group()], True
                continue
            if call is not None:
                pos, self.holding = pos + call, True
                break
            markers = reasoning.OPENERS if self._reasoned else reasoning.OPENERS + reasoning.ORPHAN_CLOSERS
            held = self._partial_start(rest, at_start=self.released + pos == 0)
            pos += min(held, reasoning.partial_marker(rest, markers))
            break
        out, self.released = text[:pos], self.released + pos
        self._pending = "" if self.holding else text[pos:]
        return out

    def _unheld(self) -> bool:
        """Release held markup a lone closer showed to be reasoning."""
        if not self._unhold:
            return False
        self._unhold, self.holding, self._pending = False, False, self.content[self.released:]
        return True

    def _call_start(self, text: str, *, at_start: bool = False) -> int | None:
        """Where the first call delimiter or call-shaped opener in `text` begins, or None."""
        delimiters = self._delimiters or self._read_starts()
        if at_start and self.names and job_lines.opens_answer(text, self.names):
            return 0
        first = delimiters.pattern.search(text)
        while first is not None and not job_lines.may_open(first.group(), text, first.end()):
            first = delimiters.pattern.search(text, first.end())
        cut = first.start() if first else len(text)
        match = _OPENER.search(text)
        if match and match.start() < cut:
            cut = match.start()
        return cut if cut < len(text) else None

    def _lead(self) -> bool:
        """False while the first line may still open a `NAME\n{` call; with `lead`, skips `all\n`."""
        self._scan.feed(self._grew)
        partial = not self._scan.broken
        if partial and (self.lead or (bool(self.names) and self._scan.may_name(self.names))):
            return False
        self._led = True
        if not self.lead and not (partial or self._may_be_named()):
            return True
        if self.lead and (text := _LEAD_TEXT.match(self._pending)) is not None:
            self.released += text.end()
            self._pending = self._pending[text.end():]
        elif _LEAD_CALL.match(self._pending):
            self.holding = True
            return False
        return True

    def _may_be_named(self) -> bool:
        """Whether the answer's first word is, or may grow into, an offered tool's name."""
        if not self.names:
            return False
        word = _FIRST_WORD.match(self._pending)
        if word is None:
            return True
        first = word.group(1).lower()
        if word.end() < len(self._pending.rstrip(" \t")) or "\n" in self._pending:
            return first in {n.lower() for n in self.names}
        return any(n.lower().startswith(first) for n in self.names)

    def _partial_start(self, text: str, *, at_start: bool = False) -> int:
        """Where a suffix of `text` could still grow into a delimiter or key-value call."""
        delimiters = self._delimiters or self._read_starts()
        cut = self._undecided_line(text, at_start)
        for at in range(max(0, len(text) - delimiters.longest), cut):
            if text[at] not in delimiters.firsts:
                continue
            tail = text[at:]
            if tail in delimiters.prefixes or _PARTIAL_OPENER.fullmatch(tail):
                return at
        return cut

    def _undecided_line(self, text: str, at_start: bool) -> int:
        """Where a last line that may become a key-value call begins, else len(text)."""
        if not self.names:
            return len(text)
        tail = max(0, len(text) - _LINE_REACH)
        return tail + job_lines.undecided(text[tail:], self.names, at_start=at_start and not tail)

    def _read_starts(self) -> _Delimiters:
        self._delimiters = _delimiters_of(self.starts)
        return self._delimiters

    def message(self) -> ChatMessage:
        """The whole answer, shaped like a non-streaming message."""
        message: dict[str, object] = {"role": "assistant", "content": self.content}
        for name, parts in self._passed.items():
            message[name] = _joined(parts)
        if self.calls:
            message["tool_calls"] = [_wire(c) for _, c in sorted(self.calls.items())]
        return cast(ChatMessage, message)


def _wire(call: _Call) -> JSONValue:
    """A streamed call in wire shape; object arguments stay objects for tier 1."""
    wire = oc.tool_call(call.id or "", call.name, call.arguments)
    if call.object_arguments is None:
        return wire
    return {**wire, "function": {"name": call.name, "arguments": call.object_arguments}}


def unseen(shown: str, final: str | None) -> str:
    """What of the final content to send after the client saw `shown` (docs/contract.md section 6)."""
    text = final or ""
    seen = shown.lstrip()
    if text.startswith(seen):
        return text[len(seen):]
    if not text.strip() or seen.startswith(text.rstrip()):
        return ""
    return text if not seen or seen[-1].isspace() or text[0].isspace() else "\n\n" + text
