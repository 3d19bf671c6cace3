"""What a call format is to the proxy, as one unit, and the registry that holds them by name.

A `Codec` reads calls a model wrote into text: `find`, the delimiters that may open one (`starts`: `find` runs
only when one occurs, and the streaming hold-back holds at them), the shapes of its generic openers that are
held while streaming (`{"` opens a JSON call, a lone `{` in prose does not), and its place in the reading order.
A `Format` is a way of writing calls the proxy can prompt a model in (`prompt_format`): how one call and one
tool result are written, the how-to-call paragraph of the tools prompt, the chat-template markers that show a
model was trained on it, the codec that reads it back, its grammar (the GBNF of one call, which constrained
rounds hold a model to: repair/grammar.py) and its as-asked reading (the mends a call written in it needs by
design, which are no mends when it was asked for: repair/mend.py). Nothing outside its module names it.

Each codec module registers its Codec and its Formats when imported (`register` / `register_format`, like
vLLM's `ToolParserManager.register_module`); `codecs/registry.py` imports them all and answers by name. Adding
a call format = one module here, its import in codecs/registry.py, and its corpus file in tests/corpus/ (real
outputs, and the chat-template line that `detect` reads: tests/corpus/README.md); tests/codecs/
test_codec_conformance.py runs every registered codec and format.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.shapes import JSONValue

# The most calls one answer may hold (a codec stops finding there; the registry and repair cut there).
MAX_CANDIDATES = 128
# The mend of arguments that were not valid JSON (repair/mend.py), named here for the formats that ask for it.
MALFORMED = "__malformed_json__"
# A call named only by a counter (`0`) among several tools: the judge names it by its argument keys.
BARE_COUNTER = "bare_counter_id"
# Arguments written by position (a JSON list): the judge names them in the order of the tool's properties.
POSITIONAL = "positional_arguments"
# One text value for a tool named without its parameter: the judge gives it to the one required string one.
SOLE_VALUE = "sole_value"

Finder = Callable[[str, frozenset[str]], list[Found]]
CallWriter = Callable[[str, JSONValue], str]  # (name, arguments: a mapping, or JSON text kept as written)
ResultWriter = Callable[[str, str, str], str]  # (tool name, call id, result text)
GrammarWriter = Callable[[str, str], str]  # (tool name, the GBNF rule of its arguments object) -> one call's GBNF


@dataclass(frozen=True)
class Codec:
    name: str  # also the `Candidate.source` of what it finds (`sources` lists any other it reports)
    find: Finder
    starts: tuple[str, ...]  # literal delimiters that may open a call
    rank: int  # the reading order, lowest first (codecs that claim reasoning blocks first, bare JSON last)
    opens: Callable[[str], bool] | None = None  # the text opens with a call without any delimiter
    generic: tuple[str, ...] = ()  # starts too common in prose to hold on: held only in the `shape` below
    shape: str = ""  # regex: a generic opener in the shape a call takes (held while streaming)
    partial_shape: str = ""  # regex: the end of streamed text that may still grow into `shape`
    holds: tuple[str, ...] = ()  # more delimiters the stream holds at (fences of the languages calls come in)
    sources: tuple[str, ...] = ()  # other `Candidate.source` values it reports (Phi's tags read by hermes)
    # A codec whose format's generation prompt already holds the first call marker (Format.opens_bare): regexes
    # for the start of a streamed answer that may still open a bare call, a bare opening of text (markup to
    # pass over) and a bare call opening (held like a delimiter).
    lead: tuple[str, str, str] | None = None
    # Its calls' parameters come as the text written between tags, which hold no types (Qwen3-Coder's
    # `<parameter=k>5</parameter>`, GLM's `<arg_value>`): a candidate whose arguments are such a mapping has
    # its values typed by the schema without a repair ("5" for an integer is how the format writes 5).
    text_values: bool = False


class Scanner:
    """`str.find` over one text for a reader whose position only moves forward: where each needle next occurs
    is remembered, so a needle is looked for again only once the reader has passed where it was (or from
    where it was not). Finding closers that never come, again from every opener, scanned the rest of the
    text each time (quadratic: bench/results/design_costs.md); with it each needle scans the text about once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._seen: dict[str, tuple[int, int]] = {}  # needle -> (searched from, found at or -1)

    def find(self, needle: str, pos: int, end: int | None = None) -> int:
        """text.find(needle, pos, end) (-1 when not there)."""
        start, at = self._seen.get(needle, (-1, -1))
        if start < 0 or pos < start or 0 <= at < pos:
            at = self.text.find(needle, pos)
            self._seen[needle] = (pos, at)
        return at if at >= 0 and (end is None or at + len(needle) <= end) else -1


def blank(text: str, spans: list[Found]) -> str:
    """The text with these spans replaced by spaces (positions stay), so the next reader passes them over."""
    pieces: list[str] = []
    pos = 0
    for f in sorted(spans, key=lambda f: f.start):
        pieces.append(text[pos : f.start])
        pieces.append(" " * (f.end - f.start))
        pos = f.end
    pieces.append(text[pos:])
    return "".join(pieces)


RESULT_OPENER = "<tool_response"
# The tags `tool_response` writes, as a model echoes them into its answer (repair/prompted.without_result_tags).
RESULT_TAGS = re.compile(
    r'<tool_response(?: name="[^"<>\n]*")?(?: id="[^"<>\n]*")?>[ \t]*\n?|\n?[ \t]*</tool_response>')


def tool_response(name: str, call_id: str, text: str) -> str:
    header = f'{RESULT_OPENER} name="{name}"' + (f' id="{call_id}"' if call_id else "") + ">"
    return f"{header}\n{text}\n</tool_response>"


@dataclass(frozen=True)
class Format:
    name: str  # the value of `prompt_format`
    codec: str  # the codec that reads it back (a call in the asked-for format is no mend)
    render_call: CallWriter
    render_result: ResultWriter = tool_response
    # The how-to-call paragraph, with %s for a tool name and %s for example arguments; "" writes "in
    # exactly this format" and an example call.
    instructions: str = ""
    # What in a chat template (llama.cpp /props, Ollama /api/show) shows the model was trained on it.
    detect: Callable[[str], bool] | None = None
    detect_rank: int = 100  # templates are matched most specific first
    families: tuple[str, ...] = ()  # Ollama's `details.family` names for models trained on it
    opens_bare: bool = False  # the generation prompt holds the first call marker: answers open with `NAME\n{`
    selectable: bool = True  # a value of `prompt_format` (the constrained rounds' JSON is not)
    # The GBNF of one call (`json_between`), for constrained rounds; None where a grammar cannot hold the
    # model to it (special tokens, whose text a grammar matches only on some builds; an opening the chat
    # template writes for the model).
    grammar: GrammarWriter | None = None
    # The mends (Repair names) a call written in this format needs by design: none is a mend when the round
    # asked for this format (the json format asks for a fence; values written as text are typed by the schema).
    as_asked: frozenset[str] = frozenset()


_ARGUMENTS = "\x00SANCTUM_ARGUMENTS\x00"  # not JSON: a CallWriter keeps it verbatim where the arguments go


def json_between(render: CallWriter) -> GrammarWriter:
    """The grammar of a format whose call is plain text around its arguments' JSON, as `render` writes it."""
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
