"""Grounding: whether a call's values come from the conversation. Rules one by one, then the recorded
answers of a small model held to the answer schema (tests/corpus/grounding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanctum_proxy.repair.grounding import Evidence, ungrounded

AREA = {
    "type": "object",
    "properties": {
        "radius": {"type": "number"},
        "unit": {"type": "string", "enum": ["cm", "m"], "default": "cm"},
        "label": {"type": "string"},
        "points": {"type": "array"},
    },
    "required": ["radius"],
}
CORPUS = json.loads((Path(__file__).parents[1] / "corpus" / "grounding" / "smollm2_constrained.json").read_text())


def said(text: str) -> Evidence:
    return Evidence.of([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}])


@pytest.mark.parametrize(("text", "value"), [
    ("a circle of radius 5", 5), ("radius 5.0 please", 5), ("radius 2.5", 2.5), ("pay 5,000 dollars", 5000),
    ("a 5% rate", 0.05), ("a 5% rate", 5), ("radius five", 5), ("from -3 to 3", -3),
    ("2 million people", 2_000_000), ("1.5 billion", 1.5e9),
])
def test_a_number_the_text_holds_is_grounded(text, value):
    assert ungrounded({"radius": value}, AREA, said(text)) == []


@pytest.mark.parametrize(("text", "value"), [("a circle of radius 15", 5), ("version 1.5.2", 2), ("x5", 5)])
def test_a_number_the_text_does_not_hold_is_made_up(text, value):
    assert ungrounded({"radius": value}, AREA, said(text)) == [f"radius={value!r}"]


def test_a_string_is_grounded_by_itself_or_any_longer_word_of_it_ignoring_case():
    assert ungrounded({"label": "New York"}, AREA, said("weather in new york?")) == []
    assert ungrounded({"label": "New York, NY"}, AREA, said("weather in York")) == []
    assert ungrounded({"label": "Tokyo"}, AREA, said("weather in Paris")) == ['label="Tokyo"']
    assert ungrounded({"label": "3x + 2"}, AREA, said("where y=3x+2 meets")) == []


def test_one_grounded_value_clears_the_call():
    assert ungrounded({"radius": 2.5, "label": "Paris"}, AREA, said("Paris")) == []
    assert ungrounded({"radius": 2.5, "label": "Rome"}, AREA, said("Paris")) == ["radius=2.5", 'label="Rome"']


@pytest.mark.parametrize("copied", [1.5, "...", "<string>", '<one of "m", "cm">', "<value>"])
def test_a_copied_example_placeholder_is_made_up_even_beside_a_grounded_value(copied):
    # The prompts show 1.5 for a number and "..." for a string where text may win, a hint of each argument's type
    # where a call is required (core/calls.example_text): a small model held to the answer schema copies them
    # into a call nobody asked for (BFCL irrelevance_0: "the area of a triangle, base 10, height 5" ->
    # determine_body_mass_index(weight=1.5, height=5); simple_python_63: {"species1": "<string>"}).
    call = {"radius": 5, "label": copied}
    assert ungrounded(call, AREA, said("a circle of radius 5")) == [f"label={copied!r}".replace("'", '"')]
    assert ungrounded(call, AREA, said(f"a circle of radius 5, label {copied}")) == []


def test_the_integer_placeholder_is_not_a_copied_example():
    # Real answers hold 1 unsaid: BFCL simple_python_385 books a hotel room with no_of_rooms=1.
    rooms = {"type": "object", "properties": {"hotel": {"type": "string"}, "no_of_rooms": {"type": "integer"}}}
    assert ungrounded({"hotel": "Hilton", "no_of_rooms": 1}, rooms, said("book a room at the Hilton")) == []


def test_schema_given_values_booleans_and_no_arguments_are_never_flagged():
    assert ungrounded({"unit": "m"}, AREA, said("nothing here")) == []
    assert ungrounded({"unit": "cm", "flag": True}, AREA, said("nothing here")) == []
    assert ungrounded({}, AREA, said("nothing here")) == []
    assert ungrounded(None, AREA, said("nothing here")) == []


def test_empty_values_count_as_made_up_only_for_required_arguments():
    assert ungrounded({"radius": ""}, AREA, said("hi")) == ['radius=""']
    assert ungrounded({"points": []}, AREA, said("hi")) == []


def test_evidence_reads_every_message_text_including_parts_and_tool_results():
    evidence = Evidence.of([
        {"role": "user", "content": [{"type": "text", "text": "city Lyon"}]},
        {"role": "tool", "tool_call_id": "c", "content": "temperature 17"},
        {"role": "assistant", "content": None},
    ])
    assert evidence.holds("Lyon") and evidence.holds(17) and not evidence.holds(18)


def _flagged(case: dict) -> bool:
    evidence = Evidence.of(case["messages"])
    parameters = {t["function"]["name"]: t["function"]["parameters"] for t in case["tools"]}
    calls = case["answer"].get("tool_calls") or [case["answer"]]
    return all(ungrounded(c["arguments"], parameters[c["name"]], evidence) for c in calls)


def test_recorded_answers_no_right_call_is_flagged_and_most_irrelevance_calls_are():
    cases = CORPUS["cases"]
    right = [c for c in cases if c["call_is_right"]]
    irrelevant = [c for c in cases if c["id"].startswith("irrelevance")]
    assert len(right) >= 20 and len(irrelevant) >= 19
    assert [c["id"] for c in right if _flagged(c)] == []
    assert sum(_flagged(c) for c in irrelevant) >= len(irrelevant) // 2
