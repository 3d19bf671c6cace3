"""The BFCL converter and AST checker of bench/bench_bfcl.py, on hand-made entries (rules: SCORING.md)."""

from __future__ import annotations

from typing import Any

from bench.bfcl_ast import Entry, check, decode_calls, to_tool

DOC = {"name": "math.hypot", "description": "length", "parameters": {
    "type": "dict", "required": ["x"], "optional": ["z"],
    "properties": {"x": {"type": "float", "default": "1.0"}, "label": {"type": "string"},
                   "pair": {"type": "tuple", "items": {"type": "dict", "properties": {"v": {"type": "any"}}}},
                   "z": {"type": "integer", "optional": True}}}}


def entry(category: str, answers: Any) -> Entry:
    return Entry("e1", category, [{"role": "user", "content": "?"}], [DOC], answers)


def call(**arguments: Any) -> dict[str, Any]:
    return {"math_hypot": arguments}


def test_bfcl_types_become_json_schema_and_names_lose_dots() -> None:
    # "ghost" is required but has no property: dropped
    ghost = {**DOC, "parameters": {**DOC["parameters"], "required": ["x", "ghost"]}}
    tool = to_tool(ghost)["function"]
    assert tool["name"] == "math_hypot"
    assert tool["parameters"] == {"type": "object", "required": ["x"], "properties": {
        "x": {"type": "number"}, "label": {"type": "string"},
        "pair": {"type": "array", "items": {"type": "object", "properties": {"v": {}}}},
        "z": {"type": "integer"}}}


def test_an_int_counts_for_a_float_and_strings_match_loosely() -> None:
    answers = [{"math.hypot": {"x": [3.0], "label": ["New York, NY"], "z": ["", 2]}}]
    assert check(entry("simple", answers), [call(x=3, label="new york ny")]) == (True, "")
    assert not check(entry("simple", answers), [call(x="3", label="New York, NY")])[0]
    assert check(entry("simple", answers), [call(x=3.0, label="x")])[1].startswith("label")


def test_an_argument_the_answer_does_not_list_fails_even_when_the_schema_allows_it() -> None:
    answers = [{"math.hypot": {"x": [3.0], "label": [""]}}]
    assert check(entry("simple", answers), [call(x=3.0, z=1)]) == (False, "unexpected parameter 'z'")
    assert check(entry("simple", answers), [call(x=3.0)]) == (True, "")


def test_parallel_calls_match_in_any_order_but_the_count_must_agree() -> None:
    answers = [{"math.hypot": {"x": [1.0]}}, {"math.hypot": {"x": [2.0]}}]
    assert check(entry("parallel", answers), [call(x=2.0), call(x=1.0)]) == (True, "")
    assert not check(entry("parallel", answers), [call(x=1.0)])[0]
    assert not check(entry("multiple", answers[:1]), [call(x=1.0), call(x=1.0)])[0]


def test_irrelevance_passes_only_without_a_decodable_call() -> None:
    text = {"role": "assistant", "content": "I cannot help with that."}
    broken = {"role": "assistant", "tool_calls": [{"function": {"name": "math_hypot", "arguments": "{x"}}]}
    made = {"role": "assistant", "tool_calls": [{"function": {"name": "math_hypot", "arguments": "{}"}}]}
    assert check(entry("irrelevance", None), decode_calls(text))[0]
    assert check(entry("irrelevance", None), decode_calls(broken))[0]
    assert not check(entry("irrelevance", None), decode_calls(made))[0]
