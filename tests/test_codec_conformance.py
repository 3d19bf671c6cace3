"""The conformance suite every codec passes over its corpus (tests/corpus/*.json), in-process:

- every registered codec reads at least one recorded output (its corpus), and the README lists it;
- split invariance: a case's content fed to the streaming Assembler in two chunks, split at every position,
  and in one-character chunks, shows live only text before the first call markup (never a partial delimiter
  or reasoning), and the content shown plus what is sent at the end is exactly the non-streamed content;
- streamed equals whole: the assembled answer gives the same calls, content and problems as the whole one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sanctum_proxy.codecs.registry import CODECS, find_calls
from sanctum_proxy.repair.mend import assess, content_text
from sanctum_proxy.repair.spellbook import SpellBook
from sanctum_proxy.streaming import Assembler, unseen
from tests.test_corpus import CASES

README = Path(__file__).resolve().parents[1] / "README.md"
# The candidate sources each codec reports (a codec may read a related format under another name).
SOURCES = {"hermes": {"hermes", "phi"}, "pythonic": {"pythonic", "gemma"}}
TEXT_CASES = [p for p in CASES if content_text(p.values[1]["message"].get("content"))]


def _content_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def _streamed(pieces: list[str]) -> tuple[Assembler, str]:
    a = Assembler()
    shown = "".join(a.feed(_content_chunk(p)) for p in pieces)
    a.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return a, shown


def _sources(tools: list[dict[str, Any]], case: dict[str, Any]) -> set[str]:
    book = SpellBook.from_tools(tools)
    text = content_text(case["message"].get("content"))
    return {c.source for f in find_calls(text, book.name_set) for c in f.candidates}


@pytest.mark.parametrize("codec", CODECS, ids=[c.NAME for c in CODECS])
def test_every_codec_reads_recorded_outputs(codec: Any) -> None:
    wanted = SOURCES.get(codec.NAME, {codec.NAME})
    hits = [p.id for p in CASES if wanted & _sources(*p.values)]
    assert hits, f"no corpus case is read by the {codec.NAME} codec"


@pytest.mark.parametrize(("tools", "case"), TEXT_CASES)
def test_split_anywhere_shows_no_markup_and_ends_with_the_whole_content(tools: list[dict[str, Any]],
                                                                        case: dict[str, Any]) -> None:
    book = SpellBook.from_tools(tools)
    text = content_text(case["message"]["content"])
    whole = assess({"role": "assistant", "content": text}, book, finish_reason=case.get("finish_reason"))
    final = whole.content or ""
    found = find_calls(text, book.name_set)
    markup_at = found[0].start if found else len(text)
    splits = [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]
    for pieces in splits:
        assembler, shown = _streamed(pieces)
        assert assembler.content == text
        assert text[:markup_at].startswith(shown), f"markup shown live: {shown[markup_at - 5:]!r}"
        assert (shown + unseen(shown, final)).strip() == final.strip()
    again = assess(assembler.message(), book, finish_reason=case.get("finish_reason"))
    assert [(c.name, c.arguments) for c in again.calls] == [(c.name, c.arguments) for c in whole.calls]
    assert again.content == whole.content
    assert [p.reason for p in again.problems] == [p.reason for p in whole.problems]


def test_readme_lists_every_codec() -> None:
    readme = README.read_text(encoding="utf-8")
    missing = [c.NAME for c in CODECS if f"`{c.NAME}`" not in readme]
    assert not missing, f"README's format table lacks {missing}"


def test_corpus_files_cite_a_source_per_case() -> None:
    for path in sorted((Path(__file__).parent / "corpus").glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            assert case.get("source"), f"{path.name}:{case['id']} has no source"
