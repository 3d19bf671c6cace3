"""The conformance suite every codec passes over its corpus (tests/corpus/*.json), in-process:

- every registered codec reads at least one recorded output (its corpus), and the README lists it;
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

from sanctum_proxy.calls import content_text
from sanctum_proxy.codecs.registry import CODECS, find_calls
from sanctum_proxy.families import opens_bare
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.spellbook import SpellBook
from sanctum_proxy.streaming import Assembler, unseen
from tests.test_corpus import CASES

README = Path(__file__).resolve().parents[1] / "README.md"
# The candidate sources each codec reports (a codec may read a related format under another name).
SOURCES = {"hermes": {"hermes", "phi"}, "pythonic": {"pythonic", "gemma"}}
# The prompt format the proxy picks for a corpus family, where that changes how a stream is read.
FAMILY_FORMATS = {"functionary-v3.2": "functionary"}
TEXT_CASES = [p for p in CASES if content_text(p.values[1]["message"].get("content"))]


def _content_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def _streamed(pieces: list[str], lead: bool) -> tuple[Assembler, str]:
    a = Assembler(lead=lead)
    shown = "".join(a.feed(_content_chunk(p)) for p in pieces)
    a.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return a, shown


def _sources(tools: list[dict[str, Any]], case: dict[str, Any]) -> set[str]:
    book = SpellBook.from_tools(tools)
    text = content_text(case["message"].get("content"))
    return {c.source for f in find_calls(text, book.name_set) for c in f.candidates}


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_every_codec_reads_recorded_outputs(codec: Any) -> None:
    wanted = SOURCES.get(codec.name, {codec.name})
    hits = [p.id for p in CASES if wanted & _sources(*p.values)]
    assert hits, f"no corpus case is read by the {codec.name} codec"


@pytest.mark.parametrize(("tools", "case"), TEXT_CASES)
def test_split_anywhere_shows_no_markup_and_ends_with_the_whole_content(tools: list[dict[str, Any]],
                                                                        case: dict[str, Any]) -> None:
    book = SpellBook.from_tools(tools)
    text = content_text(case["message"]["content"])
    lead = opens_bare(FAMILY_FORMATS.get(case["family"], ""))
    whole = assess({"role": "assistant", "content": text}, book, finish_reason=case.get("finish_reason"))
    final = whole.content or ""
    splits = [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]
    for pieces in splits:
        assembler, shown = _streamed(pieces, lead)
        assert assembler.content == text
        assert final.startswith(shown.strip()), f"shown live but not content (markup?): {shown!r}"
        assert (shown + unseen(shown, final)).strip() == final.strip()
    again = assess(assembler.message(), book, finish_reason=case.get("finish_reason"))
    assert [(c.name, c.arguments) for c in again.calls] == [(c.name, c.arguments) for c in whole.calls]
    assert again.content == whole.content
    assert [p.reason for p in again.problems] == [p.reason for p in whole.problems]


def test_readme_lists_every_codec() -> None:
    readme = README.read_text(encoding="utf-8")
    missing = [c.name for c in CODECS if f"`{c.name}`" not in readme]
    assert not missing, f"README's format table lacks {missing}"


def test_corpus_files_cite_a_source_per_case() -> None:
    for path in sorted((Path(__file__).parent / "corpus").glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            assert case.get("source"), f"{path.name}:{case['id']} has no source"
