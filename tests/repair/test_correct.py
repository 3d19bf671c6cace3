"""Corrections tell the model exactly what to fix; rejected answers are replayed as text."""

from __future__ import annotations

from typing import get_args

from sanctum_proxy.core.calls import Problem, Reason
from sanctum_proxy.repair.correct import correction, rejected_answer_text, sent_answer_text
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

BOOK = Toolbox.from_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather now",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {
                    "type": "object",
                    "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
                },
            },
        },
    ]
)


def test_unknown_tool_gets_list_of_tools() -> None:
    text = correction([Problem("unknown_spell", "create", ("there is no tool named 'create'",), "")], BOOK)
    assert "'create'" in text
    assert 'get_weather(city: string, unit?: "c" | "f") - Weather now' in text
    assert "search(tags?: array of string)" in text
    assert text.endswith("Answer again with only the corrected tool call, and nothing else.")


def test_argument_problems_name_each_argument_and_repeat_the_schema() -> None:
    problems = [
        Problem("missing_arguments", "get_weather", ("missing required argument 'city'",), ""),
        Problem(
            "unexpected_arguments", "get_weather", ("unexpected argument 'town': no such parameter",), ""
        ),
    ]
    text = correction(problems, BOOK)
    assert "- missing required argument 'city'" in text
    assert "- unexpected argument 'town'" in text
    assert '"required":["city"]' in text
    assert text.count("Its schema:") == 1


def test_malformed_json_says_the_arguments_were_not_json() -> None:
    text = correction([Problem("malformed_json", "search", ("a string value is cut off",), "")], BOOK)
    assert "not valid JSON: a string value is cut off" in text


def test_missing_call_names_the_required_tool_or_lists_them() -> None:
    assert "A call to the tool 'search' is required." in correction(
        [Problem("missing_call", "search", (), "")], BOOK
    )
    text = correction([Problem("missing_call", None, (), "")], BOOK)
    assert "A tool call is required" in text and "get_weather(" in text


def test_every_reason_has_a_correction() -> None:
    for reason in get_args(Reason):
        text = correction([Problem(reason, "get_weather", ("detail one",), "")], BOOK)
        assert "detail one" in text or reason in ("missing_call", "unknown_spell", "missing_arguments"), reason
        assert len(text.splitlines()) >= (1 if reason == "repeated_call" else 2), reason
        # A repeat and a call to tool_choice "none" are asked for text; every other reason for a call.
        closing = {"repeated_call": "detail one", "calls_not_allowed": "without calling a tool."}.get(
            reason, "nothing else.")
        assert text.endswith(closing), reason


def test_rejected_answer_text_keeps_broken_arguments_verbatim() -> None:
    message = {
        "content": "Let me see.",
        "tool_calls": [
            {"id": "1", "function": {"name": "search", "arguments": '{"tags": ["a",'}},
            {"id": "2", "function": {"name": "get_weather", "arguments": {"city": "P"}}},
        ],
    }
    assert rejected_answer_text(message) == (
        'Let me see.\n<tool_call>\n{"name": "search", "arguments": {"tags": ["a",}\n</tool_call>\n'
        '<tool_call>\n{"name":"get_weather","arguments":{"city":"P"}}\n</tool_call>'
    )


def test_sent_answer_text_keeps_native_calls_as_the_model_sent_them() -> None:
    """Issue 20: a surrender's `rejected` holds what the model sent, not the calls re-rendered as Hermes."""
    args = '{"city":  "Par'  # broken, odd spacing: byte for byte
    message = {"content": "Checking.", "tool_calls": [
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": args}}]}
    sent = sent_answer_text(message)
    assert sent == 'Checking.\n{"type":"function","function":{"name":"get_weather","arguments":"{\\"city\\":  \\"Par"}}'
    assert "<tool_call>" not in sent
    again = {**message, "tool_calls": [{**message["tool_calls"][0], "id": "call_10"}]}  # a new id, same call
    assert sent_answer_text(again) == sent
    assert rejected_answer_text(message).startswith("Checking.\n<tool_call>")  # the correction turn quotes it
    assert sent_answer_text(None) == "" and sent_answer_text({"content": "x", "tool_calls": [5]}) == "x\n5"


def test_rejected_answer_text_of_odd_messages_is_a_string() -> None:
    assert rejected_answer_text(None) == ""
    assert rejected_answer_text({"content": [{"type": "text", "text": "hi"}], "tool_calls": [5]}) == "hi"


def test_what_the_model_reads_says_tool_never_the_contracts_word_spell() -> None:
    """The contract says Spell where clients see it; a model was trained on "tool": the corrections it reads,
    with the details mend and validate wrote, never say spell."""
    answers = [
        '<tool_call>{"name": "get_wether", "arguments": {"city": "Rome"}}</tool_call>',  # unknown name
        '<tool_call>{"name": "get_weather", "arguments": {"town": "Rome"}}</tool_call>',  # missing, unexpected
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome", "unit": "k"}}</tool_call>',  # invalid
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # malformed
    ]
    for content in answers:
        problems = assess({"role": "assistant", "content": content}, BOOK).problems
        assert problems, content
        text = correction(problems, BOOK)
        assert "spell" not in text.lower(), text
