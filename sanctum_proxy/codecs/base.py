"""Call formats (codecs, prompt formats) and their registry."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.shapes import JSONValue

MAX_CANDIDATES = 128  # per answer
MALFORMED = "__malformed_json__"  # arguments were not JSON
BARE_COUNTER = "bare_counter_id"  # named by a counter, not a name
POSITIONAL = "positional_arguments"
SOLE_VALUE = "sole_value"

Finder = Callable[[str, frozenset[str]], list[Found]]
CallWriter = Callable[[str, JSONValue], str]  # (name, arguments)
ResultWriter = Callable[[str, str, str], str]  # (name, call id, result)
GrammarWriter = Callable[[str, str], str]  # (name, arguments rule) -> GBNF


@dataclass(frozen=True)
class Codec:
    name: str
    find: Finder
    starts: tuple[str, ...]
    rank: int  # reading order, lowest first
    opens: Callable[[str], bool] | None = None
    generic: tuple[str, ...] = ()  # held only in `shape`
    shape: str = ""
    partial_shape: str = ""
    holds: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    lead: tuple[str, str, str] | None = None
    text_values: bool = False  # typed by the schema, not a repair


class Scanner:
    """`str.find` for a forward-only reader, scanning the text once per needle."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._seen: dict[str, tuple[int, int]] = {}  # needle -> (from, at or -1)

    def find(self, needle: str, pos: int, end: int | None = None) -> int:
        """text.find(needle, pos, end)."""
        start, at = self._seen.get(needle, (-1, -1))
        if start < 0 or pos < start or 0 <= at < pos:
            at = self.text.find(needle, pos)
            self._seen[needle] = (pos, at)
        return at if at >= 0 and (end is None or at + len(needle) <= end) else -1


def blank(text: str, spans: list[Found]) -> str:
    """The text with these spans blanked, positions kept."""
    pieces: list[str] = []
    pos = 0
    for f in sorted(spans, key=lambda f: f.start):
        pieces.append(text[pos : f.start])
        pieces.append(" " * (f.end - f.start))
        pos = f.end
    pieces.append(text[pos:])
    return "".join(pieces)


RESULT_OPENER = "<tool_response"
# `tool_response` tags a model echoes into its answer.
RESULT_TAGS = re.compile(
    r'<tool_response(?: name="[^"<>\n]*")?(?: id="[^"<>\n]*")?>[ \t]*\n?|\n?[ \t]*</tool_response>')


def tool_response(name: str, call_id: str, text: str) -> str:
    header = f'{RESULT_OPENER} name="{name}"' + (f' id="{call_id}"' if call_id else "") + ">"
    return f"{header}\n{text}\n</tool_response>"


@dataclass(frozen=True)
class Format:
    name: str
    codec: str
    render_call: CallWriter
    render_result: ResultWriter = tool_response
    instructions: str = ""
    detect: Callable[[str], bool] | None = None
    detect_rank: int = 100  # most specific first
    families: tuple[str, ...] = ()  # Ollama's `details.family`
    opens_bare: bool = False
    selectable: bool = True
    grammar: GrammarWriter | None = None
    as_asked: frozenset[str] = frozenset()  # mends that are none in this format


_ARGUMENTS = "\x00SANCTUM_ARGUMENTS\x00"  # not JSON: kept verbatim


def json_between(render: CallWriter) -> GrammarWriter:
    """The grammar of a call written as text around its arguments' JSON."""
    def call(name: str, arguments: str) -> str:
        prefix, _, suffix = render(name, _ARGUMENTS).partition(_ARGUMENTS)
        return " ".join(p for p in (gbnf_literal(prefix), arguments, gbnf_literal(suffix)) if p != '""')
    return call


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def template_has(*markers: str) -> Callable[[str], bool]:
    """A template detector: any of these markers is in it."""
    return lambda template: any(m in template for m in markers)


_CODECS: dict[str, Codec] = {}
_FORMATS: dict[str, Format] = {}


def register(codec: Codec) -> Codec:
    if codec.name in _CODECS:
        raise ValueError(f"codec {codec.name!r} is registered twice")
    for pattern in (codec.shape, codec.partial_shape):
        re.compile(pattern)
    _CODECS[codec.name] = codec
    return codec


def register_format(fmt: Format) -> Format:
    if fmt.name in _FORMATS:
        raise ValueError(f"format {fmt.name!r} is registered twice")
    _FORMATS[fmt.name] = fmt
    return fmt


def codecs() -> tuple[Codec, ...]:
    return tuple(sorted(_CODECS.values(), key=lambda c: c.rank))


def formats() -> dict[str, Format]:
    return dict(_FORMATS)
