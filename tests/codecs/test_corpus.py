"""Every recorded model output in tests/corpus/*.json gets what its `expect` says (see corpus/README.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

CORPUS = Path(__file__).parents[1] / "corpus"


def _cases() -> list[Any]:
    out = []
    for path in sorted(CORPUS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for case in data["cases"]:
            out.append(pytest.param(data["tools"], case, id=f"{path.stem}:{case['id']}"))
    return out


CASES = _cases()


def _templates() -> dict[str, str]:
    """Each format's line of a real chat template (the corpus files' `templates`): format -> line."""
    out: dict[str, str] = {}
    for path in sorted(CORPUS.glob("*.json")):
        for fmt, entry in json.loads(path.read_text(encoding="utf-8")).get("templates", {}).items():
            assert fmt not in out, f"{path.name}: a second template line for {fmt}"
            assert entry.get("source"), f"{path.name}: the template line of {fmt} has no source"
            out[fmt] = entry["line"]
    return out


TEMPLATES = _templates()


def test_corpus_is_present_when_required() -> None:
    if not CASES:
        if os.environ.get("CORPUS_REQUIRED") == "1":
            pytest.fail(f"no corpus files in {CORPUS} (CORPUS_REQUIRED=1)")
        pytest.skip(f"no corpus files in {CORPUS} yet")


def test_corpus_ids_are_unique() -> None:
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("tools", "case"), CASES)
def test_corpus_case(tools: list[dict[str, Any]], case: dict[str, Any]) -> None:
    expect = case["expect"]
    out = assess(case["message"], Toolbox.from_tools(tools), finish_reason=case.get("finish_reason"))
    got = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in out.calls]
    assert got == expect["calls"], case["note"]
    assert [p.reason for p in out.problems] == expect["problems"], case["note"]
    assert bool(out.repairs) == expect["repaired"], [r.repairs for r in out.repairs]
    if "content" in expect:
        assert out.content == expect["content"]
    if "reasoning" in expect:
        assert out.reasoning == expect["reasoning"]
    if not expect["repaired"]:
        _assert_native_byte_identical(case["message"], out.calls)


def _assert_native_byte_identical(message: dict[str, Any], calls: Any) -> None:
    sent = {tc.get("id"): tc["function"]["arguments"] for tc in message.get("tool_calls") or []}
    for call in calls:
        if call.id in sent:
            assert call.arguments == sent[call.id]
