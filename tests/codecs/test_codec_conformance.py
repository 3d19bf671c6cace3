"""The conformance suite every registered codec and format passes (codecs/registry.py), in-process. Adding a
call format is one module in codecs/ and its corpus file in tests/corpus/: this suite then checks it.

- every registered codec reads at least one recorded output (its corpus), and docs/formats.md lists it;
- every registered format's call, rendered, is read back by its codec as that call, clean when asked for and a
  `<codec>_in_content` mend when not; and streamed in any chunking it shows no markup and gives the same call;
- split invariance: a case's content fed to the streaming Assembler in two chunks, split at every position,
  and in one-character chunks, shows live only a prefix of the non-streamed content (never markup, a partial
  delimiter or reasoning), and the content shown plus what is sent at the end is exactly that content;
- streamed equals whole: the assembled answer gives the same calls, content and problems as the whole one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sanctum_proxy.codecs.families import opens_bare, render_call
from sanctum_proxy.codecs.registry import CODECS, FORMAT_NAMES, FORMATS, find_calls
from sanctum_proxy.core.calls import content_text
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.streaming import Assembler, unseen, with_tools
from sanctum_proxy.repair.toolbox import Toolbox
from tests.codecs.test_corpus import CASES

ROOT = Path(__file__).resolve().parents[2]
FORMATS_DOC = ROOT / "docs" / "formats.md"  # the format table
TEXT_CASES = [p for p in CASES if content_text(p.values[1]["message"].get("content"))]


def _content_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def _streamed(pieces: list[str], lead: bool, names: frozenset[str] = frozenset()) -> tuple[Assembler, str]:
    # as routes/sse.py builds it for a round with these tools
    a = Assembler(starts=with_tools(names), lead=lead, names=names)
    shown = "".join(a.feed(_content_chunk(p)) for p in pieces)
    a.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return a, shown


def _sources(tools: list[dict[str, Any]], case: dict[str, Any]) -> set[str]:
    book = Toolbox.from_tools(tools)
    text = content_text(case["message"].get("content"))
    return {c.source for f in find_calls(text, book.name_set) for c in f.candidates}


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_every_codec_reads_recorded_outputs(codec: Any) -> None:
    wanted = {codec.name, *codec.sources}
    hits = [p.id for p in CASES if wanted & _sources(*p.values)]
    assert hits, f"no corpus case is read by the {codec.name} codec"


@pytest.mark.parametrize(("tools", "case"), TEXT_CASES)
def test_split_anywhere_shows_no_markup_and_ends_with_the_whole_content(tools: list[dict[str, Any]],
                                                                        case: dict[str, Any]) -> None:
    book = Toolbox.from_tools(tools)
    text = content_text(case["message"]["content"])
    lead = opens_bare(case.get("format", ""))  # the prompt format the case answers, where it changes the reading
    whole = assess({"role": "assistant", "content": text}, book, finish_reason=case.get("finish_reason"))
    final = whole.content or ""
    splits = [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]
    for pieces in splits:
        assembler, shown = _streamed(pieces, lead, book.name_set)
        assert assembler.content == text
        assert final.startswith(shown.strip()), f"shown live but not content (markup?): {shown!r}"
        assert (shown + unseen(shown, final)).strip() == final.strip()
    again = assess(assembler.message(), book, finish_reason=case.get("finish_reason"))
    assert [(c.name, c.arguments) for c in again.calls] == [(c.name, c.arguments) for c in whole.calls]
    assert again.content == whole.content
    assert [p.reason for p in again.problems] == [p.reason for p in whole.problems]


def test_the_format_table_lists_every_format_and_codec() -> None:
    table = FORMATS_DOC.read_text(encoding="utf-8")
    assert not [f for f in FORMAT_NAMES if f"`{f}`" not in table], "docs/formats.md's table lacks a format"
    missing = [c.name for c in CODECS if f"`{c.name}`" not in table]
    assert not missing, f"docs/formats.md's table lacks {missing}"


def test_corpus_formats_are_registered() -> None:
    named = {c.get("format") for p in CASES for c in [p.values[1]] if "format" in c}
    assert named <= set(FORMATS), named - set(FORMATS)


def test_corpus_files_cite_a_source_per_case() -> None:
    for path in sorted((Path(__file__).parents[1] / "corpus").glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            assert case.get("source"), f"{path.name}:{case['id']} has no source"


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
ARGS = {"city": "Paris", "days": 3}


def test_every_format_is_read_by_a_registered_codec() -> None:
    names = {c.name for c in CODECS}
    assert {f.codec for f in FORMATS.values()} <= names
    assert set(FORMAT_NAMES) <= set(FORMATS) and "constrained" not in FORMAT_NAMES
    # mend reads `asked_format` as a format's name or its codec's (families.as_asked): the same reading either way
    assert all(FORMATS[f.codec].codec == f.codec for f in FORMATS.values())


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_format_renders_a_call_its_codec_reads_back(fmt: str) -> None:
    book = Toolbox.from_tools(WEATHER)
    read = assess({"role": "assistant", "content": render_call(fmt, "get_weather", ARGS)}, book)
    assert [(c.name, json.loads(c.arguments)) for c in read.calls] == [("get_weather", ARGS)]
    assert read.content is None and not read.problems
    text = render_call(fmt, "get_weather", {"city": "Paris"})  # strings only: XML-ish formats coerce numbers
    asked = assess({"role": "assistant", "content": text}, book, asked_format=fmt)
    assert len(asked.calls) == 1 and asked.repairs == (), (fmt, asked.repairs)
    other = assess({"role": "assistant", "content": text}, book)  # not asked for: read, and said
    assert other.repairs and other.repairs[0].repairs[0] == f"{FORMATS[fmt].codec}_in_content"


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_format_streamed_in_any_chunking_shows_no_markup_and_gives_the_whole_call(fmt: str) -> None:
    book = Toolbox.from_tools(WEATHER)
    lead = opens_bare(fmt)
    call = render_call(fmt, "get_weather", ARGS)
    text = call if lead else "Let me check. " + call
    whole = assess({"role": "assistant", "content": text}, book)
    final = whole.content or ""
    for pieces in [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]:
        assembler, shown = _streamed(pieces, lead, book.name_set)
        assert final.startswith(shown.strip()), f"{fmt}: shown live but not content: {shown!r}"
        assert (shown + unseen(shown, final)).strip() == final.strip()
        again = assess(assembler.message(), book)
        assert [(c.name, c.arguments) for c in again.calls] == [(c.name, c.arguments) for c in whole.calls]
