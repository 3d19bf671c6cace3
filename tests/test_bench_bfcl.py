"""The BFCL converter and AST checker of bench/bench_bfcl.py, on hand-made entries (rules: SCORING.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.bfcl_ast import Entry, bfcl_result, check, decode_calls, to_tool

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


# --- glue to the official evaluator (bench/bfcl_official.py) ---

ANSWERED = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "math_hypot", "arguments": '{"x": 4, "y": 5}'}},
    {"id": "c2", "type": "function", "function": {"name": "math_hypot", "arguments": "{x"}}]}


def test_the_official_result_is_one_name_to_arguments_text_per_call_as_the_sdk_handler_records_it() -> None:
    # bfcl-eval's OpenAI FC handler keeps the arguments as the text the server sent: its decode_ast
    # json.loads them, so broken text must reach it unparsed
    assert bfcl_result(ANSWERED, "") == [{"math_hypot": '{"x": 4, "y": 5}'}, {"math_hypot": "{x"}]


def test_without_tool_calls_the_official_result_is_the_content_and_a_failed_request_is_bfcls_error_text() -> None:
    assert bfcl_result({"role": "assistant", "content": "No tool fits."}, "") == "No tool fits."
    assert bfcl_result({"role": "assistant", "content": "hi", "tool_calls": None}, "") == "hi"
    assert bfcl_result({"role": "assistant", "content": "", "tool_calls": []}, "") == []
    assert bfcl_result(None, "HTTP 422") == "Error during inference: HTTP 422"


BFCL_VENV_PYTHON = Path(__file__).resolve().parent.parent / "bench" / ".venv-bfcl" / "bin" / "python"
DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks" / "bfcl"


@pytest.mark.skipif(not BFCL_VENV_PYTHON.is_file() or not DATA.is_dir(),
                    reason="opt-in: needs bench/.venv-bfcl (bfcl-eval, see bench/README.md) and the BFCL data")
def test_the_official_checker_scores_our_saved_answers(tmp_path: Path) -> None:
    """bench/bfcl_official.py end to end on hand-made answers: bfcl-eval's checker (in its own venv) decodes
    our result shape (a pass, a type error, text, a failed request; a call and text for irrelevance)."""
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "math_factorial", "arguments": '{"number": 5}'}}]}
    wrong = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "math_factorial", "arguments": '{"number": "5"}'}}]}  # a string for an integer
    text = {"role": "assistant", "content": "The factorial of 5 is 120."}
    rows = [("simple_python_1", "simple", "call", call, ""), ("simple_python_1", "simple", "wrong", wrong, ""),
            ("simple_python_1", "simple", "text", text, ""), ("simple_python_1", "simple", "error", None, "HTTP 422"),
            ("irrelevance_0", "irrelevance", "call", call, ""), ("irrelevance_0", "irrelevance", "text", text, "")]
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps({"model": "m", "column": column, "id": entry_id, "category": category,
                                       "message": message, "error": error, "seconds": 1.0}) + "\n"
                           for entry_id, category, column, message, error in rows))
    verdicts = tmp_path / "verdicts.jsonl"
    done = subprocess.run([str(BFCL_VENV_PYTHON), "bench/bfcl_official.py", "--raw", str(raw), "--data", str(DATA),
                           "--out", str(tmp_path / "report.md"), "--json", str(verdicts)],
                          cwd=BFCL_VENV_PYTHON.parents[3], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = verdicts.read_text().splitlines()
    got = {(v["id"], v["column"]): (v["official"], v["ours"]) for v in map(json.loads, lines)}
    assert got == {("simple_python_1", "call"): (True, True), ("simple_python_1", "wrong"): (False, False),
                   ("simple_python_1", "text"): (False, False), ("simple_python_1", "error"): (False, False),
                   ("irrelevance_0", "call"): (False, False), ("irrelevance_0", "text"): (True, True)}
    assert "Nowhere: every answer got the same verdict" in (tmp_path / "report.md").read_text()


def test_bfcls_variable_case_compares_as_is_and_checks_items_against_each_answer_list() -> None:
    # found by comparing with bfcl-eval's checker (parallel_multiple_21 and _94): answers of another type
    # than the doc's are "variables", compared without normalising; array items may be variables too
    doc = {"name": "fit", "parameters": {"type": "dict", "properties": {
        "x": {"type": "array", "items": {"type": "float"}}, "e": {"type": "array", "items": {"type": "integer"}}}}}
    e = Entry("e2", "simple", [], [doc], [{"fit": {"x": ["data['sales']"], "e": [["apple"], ""]}}])
    assert check(e, [{"fit": {"x": "data['sales']"}}]) == (True, "")
    assert not check(e, [{"fit": {"x": "DATA['sales']"}}])[0]
    assert check(e, [{"fit": {"x": "data['sales']", "e": ["apple"]}}]) == (True, "")
    strict = Entry("e3", "simple", [], [doc], [{"fit": {"x": [[1.0]]}}])
    assert check(strict, [{"fit": {"x": [1.0]}}]) == (True, "")
    assert check(strict, [{"fit": {"x": ["1.0"]}}])[1] == "x: an item is not float"


def test_an_int_for_a_float_passes_alone_but_not_as_an_array_item() -> None:
    # simple_python_13, SmolLM2 constrained: "interval": [1, 3] for an array of float; bfcl-eval fails it
    doc = {"name": "area", "parameters": {"type": "dict", "properties": {
        "interval": {"type": "array", "items": {"type": "float"}}, "step": {"type": "float"}}}}
    e = Entry("e4", "simple", [], [doc], [{"area": {"interval": [[1.0, 3.0]], "step": [1.0, ""]}}])
    assert check(e, [{"area": {"interval": [1.0, 3.0], "step": 1}}]) == (True, "")
    assert check(e, [{"area": {"interval": [1, 3]}}]) == (False, "interval: an item is not float")


def test_grounding_replay_answers_a_copied_example_in_text_and_keeps_a_right_call() -> None:
    from bench.bfcl_grounding_replay import flagged

    bmi = {"name": "determine_body_mass_index", "description": "BMI", "parameters": {
        "type": "dict", "required": ["weight", "height"],
        "properties": {"weight": {"type": "float"}, "height": {"type": "float"}}}}
    question = [{"role": "user", "content": "Calculate the area of a triangle, base 10 meters and height 5 meters."}]
    irrelevance_0 = Entry("irrelevance_0", "irrelevance", question, [bmi], None)

    def made(**arguments: Any) -> list[dict[str, Any]]:
        return [{"function": {"name": "determine_body_mass_index", "arguments": json.dumps(arguments)}}]

    assert flagged(irrelevance_0, made(weight=1.5, height=5))  # the prompt's example number, copied
    assert not flagged(irrelevance_0, made(weight=10, height=5))  # every value from the question
    assert not flagged(irrelevance_0, [])


def test_even_entries_of_a_category_tune_and_odd_ones_are_held_out() -> None:
    from bench.bfcl_ast import half

    assert [half(f"simple_python_{i}") for i in range(4)] == ["tuning", "held-out", "tuning", "held-out"]
    assert half("irrelevance_61") == "held-out" and half("live_multiple_12-4-2") == "tuning"


def test_the_report_shows_both_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_bfcl's report over hand-made tallies: a row per column and half."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import argparse

    import bench_bfcl

    tally = bench_bfcl.Tally(seconds=[1.0])
    a_call = {"role": "assistant", "content": None,
              "tool_calls": [{"id": "c", "type": "function", "function": {"name": "math_hypot", "arguments": "{}"}}]}
    for i, message in enumerate([None, {"role": "assistant", "content": "no call"}, None, a_call]):
        bench_bfcl.score(tally, Entry(f"irrelevance_{i}", "irrelevance", [], [DOC], None), message,
                         "HTTP 422" if i == 0 else "")
    args = argparse.Namespace(quick=False, constrain_modes=False, limit=4, skip=0, half=None,
                              categories=["irrelevance"], model=None, threads=2, template={}, max_tokens=128,
                              minutes=1)
    text = bench_bfcl.report({"direct native": tally}, args, 1.0, [])
    assert "| direct native | tuning | 100% | 100% |" in text and "| direct native | held-out | 50% | 50% |" in text


def test_the_held_out_half_from_an_offset_is_asked_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--skip 2 --half held-out --limit 2: the odd entries from the third on, two per category, in turn."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_bfcl

    (tmp_path / "data").mkdir()
    for category, stem in (("simple", "simple_python"), ("irrelevance", "irrelevance")):
        rows = [{"id": f"{stem}_{i}", "question": [[{"role": "user", "content": str(i)}]], "function": [DOC]}
                for i in range(8)]
        (tmp_path / "data" / bench_bfcl.bfcl_ast.FILES[category]).write_text(
            "\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    args = bench_bfcl.parse(["--data", str(tmp_path), "--skip", "2", "--half", "held-out", "--limit", "2",
                             "--categories", "simple,irrelevance"])
    assert [e.id for e in bench_bfcl.chosen(args)] == [
        "simple_python_3", "irrelevance_3", "simple_python_5", "irrelevance_5"]
    args = bench_bfcl.parse(["--data", str(tmp_path), "--half", "tuning", "--limit", "9", "--categories", "simple"])
    assert [e.id for e in bench_bfcl.chosen(args)] == [f"simple_python_{i}" for i in (0, 2, 4, 6)]


def test_every_column_can_be_named_in_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """--columns splits on commas: a column name with one could never be asked for."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_bfcl

    names = [*bench_bfcl.COLUMNS, *bench_bfcl.RULE_COLUMNS]
    assert all("," not in name for name in names)
    assert set(bench_bfcl.SERVER_SETTINGS) <= set(names)
    args = bench_bfcl.parse(["--columns", "direct native,proxy constrained + follow-up"])
    assert args.columns == ["direct native", "proxy constrained + follow-up"]


def test_the_grounding_replay_takes_the_call_a_text_round_replaced() -> None:
    """bfcl_traces_replay: a trace whose round 1 calls were rejected as made up answers with those calls; any
    other trace with the answer the client got."""
    from bench.bfcl_traces_replay import without_grounding

    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]
    text = {"role": "assistant", "content": "no call"}
    flagged = {"omens": [{"type": "SpellCallRejected", "round": 1, "reason": "ungrounded_arguments"}],
               "rounds": [{"number": 1, "answer": {"role": "assistant", "content": None, "tool_calls": calls}},
                          {"number": 2, "answer": text}],
               "answer": {"message": text}}
    assert without_grounding(flagged) == ({"role": "assistant", "content": None, "tool_calls": calls}, True)
    other = {**flagged, "omens": [{"type": "SpellCallRejected", "round": 1, "reason": "missing_call"}]}
    assert without_grounding(other) == (text, False)


def test_paired_counts_only_entries_both_columns_answered() -> None:
    from bench.bfcl_paired import paired

    def v(column: str, entry: str, passed: bool) -> dict[str, object]:
        return {"model": "m", "column": column, "id": entry, "category": "simple", "official": passed}

    verdicts = [v("a", "simple_python_1", False), v("b", "simple_python_1", True), v("a", "simple_python_3", True),
                v("b", "simple_python_3", True), v("b", "simple_python_5", True), v("a", "simple_python_2", True),
                v("b", "simple_python_2", False)]
    assert paired(verdicts, "a", "b") == [
        "| m | b vs a | held-out simple 1 -> 2 / 2, tuning simple 1 -> 0 / 1 |"]
