"""Calls written in no call format: a key-value line and a tag named after the tool's job.

    read_file file="C:\\Users\\me\\notes.txt"
    <terminal_command>ls -la</terminal_command>        (for `run_terminal_command`)

Read only where the name stands for one offered tool (a tag: the tool's words less `run_`, `_command` and the
like, alone or with one of them). The value goes to the line's key, or the tool's one required string (SOLE_VALUE).
"""

from __future__ import annotations

import functools
import json
import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import SOLE_VALUE, Codec, register
from sanctum_proxy.core.calls import Candidate, Found

NAME = "job_lines"
# How a tool is called, not what it does.
_GENERIC = frozenset({"run", "execute", "exec", "call", "invoke", "command", "cmd", "tool"})
_VERBS = ("run", "execute", "exec")
_SUFFIXES = ("command", "cmd")
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_LINE = re.compile(r"(?m)^[ \t]*([A-Za-z_][\w.\-]{0,255})[ \t]+([A-Za-z_]\w{0,63})=\"([^\"\n]*)\"[ \t]*$")
_TAG = re.compile(r"<([A-Za-z_][\w\-]{0,127})>")
STARTS: tuple[str, ...] = ('="', "</")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out = _lines(text, tool_names) if '="' in text else []
    if "</" in text:
        out += _tags(text, tool_names, out)
    return sorted(out, key=lambda f: f.start)[: json_blocks.MAX_ATTEMPTS]


def _lines(text: str, names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    for m in _LINE.finditer(text):
        if m.group(1) in names and len(out) < json_blocks.MAX_ATTEMPTS:
            raw = m.group()
            start = m.start() + len(raw) - len(raw.lstrip())
            value = {m.group(2): m.group(3)}
            out.append(Found(start, m.end(), (_candidate(m.group(1), value, text[start : m.end()]),)))
    return out


def _tags(text: str, names: frozenset[str], taken: list[Found]) -> list[Found]:
    out: list[Found] = []
    owners = tag_owners(names)
    unclosed: set[str] = set()  # tags whose closer is nowhere after them: never looked for again (linear)
    for m in _TAG.finditer(text):
        tool = owners.get(m.group(1))
        if tool is None or m.group(1) in unclosed or any(f.start <= m.start() < f.end for f in out):
            continue
        close = text.find(f"</{m.group(1)}>", m.end())
        if close < 0:
            unclosed.add(m.group(1))
            continue
        if any(m.start() < f.end and f.start < close for f in taken):
            continue
        end = close + len(m.group(1)) + 3
        out.append(Found(m.start(), end, (_candidate(tool, text[m.end() : close].strip(), text[m.start() : end]),)))
        if len(out) >= json_blocks.MAX_ATTEMPTS:
            break
    return out


def _candidate(name: str, value: str | dict[str, str], raw: str) -> Candidate:
    return Candidate(name, json.dumps(value, ensure_ascii=False), NAME, raw, None, (SOLE_VALUE,))


@functools.lru_cache(maxsize=64)
def tag_owners(names: frozenset[str]) -> dict[str, str]:
    """Each tag a job-named call may use -> the one offered tool it stands for (shared tags left out)."""
    seen: dict[str, set[str]] = {}
    for name in names:
        for tag in _tag_forms(name):
            seen.setdefault(tag, set()).add(name)
    return {tag: next(iter(tools)) for tag, tools in seen.items() if len(tools) == 1}


def _tag_forms(name: str) -> set[str]:
    words = [w.lower() for w in _WORDS.findall(name)]
    core = "_".join(w for w in words if w not in _GENERIC)
    forms = {name}
    if core:
        forms |= {core, *(f"{v}_{core}" for v in _VERBS), *(f"{core}_{s}" for s in _SUFFIXES)}
    return forms


# After `\nNAME ` at a line's start: `key="` (a key-value line), or the start of one still arriving.
_KEY_OPEN = re.compile(r"[ \t]{0,3}[A-Za-z_]\w{0,63}=\"")
_KEY_PARTIAL = re.compile(r"[ \t]{0,3}(?:[A-Za-z_]\w{0,63}(?:=\"?)?)?\Z")
_FIRST = re.compile(r"[ \t]*([A-Za-z_][\w.\-]{0,255}) ")


def may_open(start: str, text: str, end: int) -> bool:
    """Whether a stream start found in `text` (ending at `end`) opens a call: a line's `NAME ` only before
    `key="`, so prose that opens a line with a tool's name streams on."""
    return not (start.startswith("\n") and start.endswith(" ")) or _KEY_OPEN.match(text, end) is not None


def opens_answer(text: str, names: frozenset[str]) -> bool:
    """Whether an answer opens with a key-value line's `NAME key="`."""
    m = _FIRST.match(text)
    return m is not None and m.group(1) in names and _KEY_OPEN.match(text, m.end()) is not None


def undecided(text: str, names: frozenset[str], *, at_start: bool) -> int:
    """Where a last line `NAME k` whose `key="` may still come begins (its line break included), else len(text)."""
    line = text.rfind("\n") + 1
    if not line and not at_start:
        return len(text)
    m = _FIRST.match(text, line)
    if m is None or m.group(1) not in names or _KEY_PARTIAL.match(text, m.end()) is None:
        return len(text)
    return max(line - 1, 0)


def stream_starts(names: frozenset[str]) -> tuple[str, ...]:
    """Where the stream holds for these tools: a line opening with a name and a blank, a job tag."""
    return (*(f"\n{name} " for name in sorted(names)), *(f"<{tag}>" for tag in sorted(tag_owners(names))))


# Last: only text no other codec reads.
CODEC = register(Codec(NAME, find, STARTS, rank=140, generic=STARTS))
