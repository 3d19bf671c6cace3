"""Calls written without any call format, seen from small models through Ollama:

    read_file file="C:\\Users\\me\\notes.txt"          a key-value line: an offered tool's name, one `key="value"`
    <terminal_command>ls -la</terminal_command>      a tag named after the tool's job (`run_terminal_command`)

Each is read only where its name stands for one offered tool: the line's first word is that tool's name; the
tag is the tool's name, or its words without the verbs and nouns any tool may carry (`run_`, `execute_`,
`_command`), alone or with one of them (`execute_bash` for `bash`). The value goes to the tool's one required
string parameter, or to the line's key where the tool has it (SOLE_VALUE: the judge names it; a tool without
one gets a question naming it). Anything
else stays text. A value in quotes is read as written (a Windows path keeps its backslashes).
"""

from __future__ import annotations

import functools
import json
import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import SOLE_VALUE, Codec, register
from sanctum_proxy.core.calls import Candidate, Found

NAME = "job_lines"
# Words that say how a tool is called, not what it does.
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
    for m in _TAG.finditer(text):
        tool = owners.get(m.group(1))
        if tool is None or len(out) >= json_blocks.MAX_ATTEMPTS or any(f.start <= m.start() < f.end for f in out):
            continue
        close = text.find(f"</{m.group(1)}>", m.end())
        if close < 0 or any(m.start() < f.end and f.start < close for f in taken):
            continue
        end = close + len(m.group(1)) + 3
        out.append(Found(m.start(), end, (_candidate(tool, text[m.end() : close].strip(), text[m.start() : end]),)))
    return out


def _candidate(name: str, value: str | dict[str, str], raw: str) -> Candidate:
    return Candidate(name, json.dumps(value, ensure_ascii=False), NAME, raw, None, (SOLE_VALUE,))


@functools.lru_cache(maxsize=64)
def tag_owners(names: frozenset[str]) -> dict[str, str]:
    """Each tag a job-named call may use, and the one offered tool it stands for (tags two tools share are left
    out: ambiguous)."""
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


def stream_starts(names: frozenset[str]) -> tuple[str, ...]:
    """What the stream holds at for these tools: a line opening with a tool's name and a blank, a job tag."""
    return (*(f"\n{name} " for name in sorted(names)), *(f"<{tag}>" for tag in sorted(tag_owners(names))))


# After every format: only text no other codec reads is looked at.
CODEC = register(Codec(NAME, find, STARTS, rank=140, generic=STARTS))
