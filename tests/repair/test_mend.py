"""Tier 1 through `assess`: valid calls pass untouched, lossless mends are made and reported, and what
would need inventing or guessing is left to tier 2 as a Problem."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sanctum_proxy.repair.mend import MALFORMED, assess
from sanctum_proxy.repair.toolbox import Toolbox

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time"}},
]
BOOK = Toolbox.from_tools(TOOLS)


def ids() -> Any:
    n = iter(range(1000))
    return lambda: f"call_{next(n)}"


def native(name: str, arguments: Any, call_id: str = "call_x") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def content(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_valid_native_call_comes_back_byte_identical() -> None:
    args = '{ "city" : "Paris",\n "days": 2 }'
    out = assess(native("get_weather", args, "abc"), BOOK)
    assert out.ok and out.repairs == ()
    assert out.calls[0].arguments == args and out.calls[0].id == "abc"


def test_trailing_comma_is_mended_locally() -> None:
    out = assess(native("get_weather", '{"city": "Paris",}'), BOOK)
    assert out.ok
    assert json.loads(out.calls[0].arguments) == {"city": "Paris"}
    assert out.repairs[0].repairs[:2] == (MALFORMED, "trailing_comma")


def test_hermes_call_in_content_becomes_a_tool_call_and_leaves_content() -> None:
    msg = content(
        "Let me check.\n<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Oslo',}}\n</tool_call>"
    )
    out = assess(msg, BOOK, new_id=ids())
    assert out.content == "Let me check."
    assert out.calls[0].to_openai() == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    assert {"hermes_in_content", "single_quotes", "trailing_comma"} <= set(out.repairs[0].repairs)


def test_content_that_was_only_a_call_becomes_none() -> None:
    out = assess(content('  {"name": "get_weather", "arguments": {"city": "Oslo"}}\n'), BOOK)
    assert out.content is None and len(out.calls) == 1


def test_whitespace_content_becomes_none() -> None:
    assert assess(content(" \n "), BOOK).content is None


def test_prose_without_calls_stays_byte_identical() -> None:
    text = 'The answer is {"x": 1}, see [1].'
    out = assess(content(text), BOOK)
    assert out.content == text and out.calls == () and out.ok


def test_content_given_as_parts_is_read() -> None:
    msg = {
        "role": "assistant",
        "content": [{"type": "text", "text": '<tool_call>{"name": "get_time"}</tool_call>'}],
    }
    assert [c.name for c in assess(msg, BOOK).calls] == ["get_time"]


@pytest.mark.parametrize(
    ("written", "repair"), [("Get_Weather", "name_case"), ("functions.get_weather", "name_prefix")]
)
def test_name_differing_by_case_or_prefix_is_mapped(written: str, repair: str) -> None:
    args = '{"city": "Paris"}'
    out = assess(native(written, args), BOOK)
    assert out.calls[0].name == "get_weather"
    assert out.calls[0].arguments == args  # only the name changed
    assert repair in out.repairs[0].repairs


NAMESPACED = Toolbox.from_tools([
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("multi_agent_v1__spawn_agent", "multi_agent_v1__close_agent", "crm__close_agent", "get_time")])


@pytest.mark.parametrize(("written", "meant"), [
    ("multi_agent_v1.spawn_agent", "multi_agent_v1__spawn_agent"),  # Codex's namespaces, offered flat
    ("multi_agent_v1:spawn_agent", "multi_agent_v1__spawn_agent"),
    ("crm/close_agent", "crm__close_agent"),
    ("spawn_agent", "multi_agent_v1__spawn_agent"),  # one namespace has it
])
def test_a_namespaced_name_written_another_way_is_mapped(written: str, meant: str) -> None:
    out = assess(native(written, "{}"), NAMESPACED)
    assert [c.name for c in out.calls] == [meant] and "name_namespace" in out.repairs[0].repairs


@pytest.mark.parametrize("written", ["close_agent", "other.spawn_agent", "time"])
def test_a_name_two_namespaces_share_or_none_has_stays_unknown(written: str) -> None:
    out = assess(native(written, "{}"), NAMESPACED)
    assert out.calls == () and [p.reason for p in out.problems] == ["unknown_spell"]


def test_unknown_name_is_a_problem_naming_it() -> None:
    out = assess(native("Apply tags to a document", '{"tags": ["a"]}'), BOOK)
    assert [(p.reason, p.tool) for p in out.problems] == [("unknown_spell", "Apply tags to a document")]
    assert out.calls == ()


@pytest.mark.parametrize(("value", "want"), [('"3"', 3), ('"-12"', -12)])
def test_numeric_string_is_coerced_for_an_integer(value: str, want: int) -> None:
    out = assess(native("get_weather", '{"city": "P", "days": ' + value + "}"), BOOK)
    assert json.loads(out.calls[0].arguments)["days"] == want
    assert "coerced_integer" in out.repairs[0].repairs


def test_lossless_coercions_the_schema_allows() -> None:
    args = {"city": 7, "metric": "true", "tags": '["a", "b"]'}
    out = assess(native("get_weather", json.dumps(args)), BOOK)
    assert json.loads(out.calls[0].arguments) == {"city": "7", "metric": True, "tags": ["a", "b"]}


def test_non_numeric_string_is_not_coerced_but_reported() -> None:
    out = assess(native("get_weather", '{"city": "P", "days": "three"}'), BOOK)
    assert [p.reason for p in out.problems] == ["invalid_arguments"]
    assert "days" in out.problems[0].details[0]


def test_double_encoded_arguments_are_unwrapped() -> None:
    out = assess(native("get_weather", json.dumps(json.dumps({"city": "Paris"}))), BOOK)
    assert json.loads(out.calls[0].arguments) == {"city": "Paris"}
    assert "double_encoded" in out.repairs[0].repairs


def test_object_arguments_are_serialised() -> None:
    out = assess(native("get_weather", {"city": "Paris"}), BOOK)
    assert out.calls[0].arguments == '{"city":"Paris"}'
    assert out.repairs[0].repairs == ("arguments_object",)


@pytest.mark.parametrize("args", ["", None, "  "])
def test_empty_arguments_for_a_tool_without_parameters_are_an_empty_object(args: Any) -> None:
    out = assess(native("get_time", args), BOOK)
    assert out.ok and out.calls[0].arguments == "{}"


def test_empty_arguments_for_a_tool_with_required_parameters_are_missing() -> None:
    out = assess(native("get_weather", ""), BOOK)
    assert [p.reason for p in out.problems] == ["missing_arguments"]


def test_string_cut_off_by_max_tokens_goes_to_tier_two() -> None:
    out = assess(native("get_weather", '{"city": "Par'), BOOK, finish_reason="length")
    assert [p.reason for p in out.problems] == ["malformed_json"]
    assert out.calls == ()


def test_unclosed_braces_are_closed_unless_the_answer_was_cut() -> None:
    msg = content('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}')
    assert assess(msg, BOOK).ok
    cut = assess(msg, BOOK, finish_reason="length")
    assert [p.reason for p in cut.problems] == ["malformed_json"]


def test_values_json_repair_would_invent_are_refused() -> None:
    out = assess(native("get_weather", '{"city": "Oslo", "days": }'), BOOK)
    assert [p.reason for p in out.problems] == ["malformed_json"]


def test_missing_native_id_gets_a_fresh_one() -> None:
    out = assess(native("get_weather", '{"city": "P"}', call_id=""), BOOK, new_id=ids())
    assert out.calls[0].id == "call_0"


def test_default_ids_look_like_openai_ids() -> None:
    out = assess(content('{"name": "get_time", "arguments": {}}'), BOOK)
    assert out.calls[0].id.startswith("call_") and len(out.calls[0].id) == 29


def test_parallel_tool_calls_false_keeps_the_first_valid_call() -> None:
    msg = content('{"name": "get_time", "arguments": {}} {"name": "get_weather", "arguments": {"city": "P"}}')
    out = assess(msg, BOOK, parallel_tool_calls=False)
    assert [c.name for c in out.calls] == ["get_time"]
    assert [c.name for c in out.dropped] == ["get_weather"]


def test_mixed_answer_keeps_good_calls_and_reports_bad_ones() -> None:
    msg = content(
        '<tool_call>{"name": "get_time"}</tool_call><tool_call>{"name": "nope", "arguments": {}}</tool_call>'
    )
    out = assess(msg, BOOK)
    assert [c.name for c in out.calls] == ["get_time"]
    assert [p.reason for p in out.problems] == ["unknown_spell"]


def test_content_echo_of_a_native_call_is_not_doubled() -> None:
    msg = native("get_weather", '{"city":"P"}')
    msg["content"] = '<tool_call>{"name": "get_weather", "arguments": {"city": "P"}}</tool_call>'
    out = assess(msg, BOOK)
    assert len(out.calls) == 1 and out.content is None


@pytest.mark.parametrize(
    "message",
    [
        None,
        3,
        "x",
        {},
        {"tool_calls": "x"},
        {"tool_calls": [None, 1, {}]},
        {"tool_calls": [{"function": {"name": 5, "arguments": [1]}}]},
        {"content": 5},
        {"content": [None, {"type": "image"}]},
    ],
)
def test_hostile_messages_never_raise(message: Any) -> None:
    assess(message, BOOK)


def test_huge_and_deep_inputs_are_bounded() -> None:
    assess(content("{" * 200_000), BOOK)
    assess(content("[" * 50_000 + "]" * 50_000), BOOK)
    assess(native("get_weather", "[" * 100_000), BOOK)
    assess(content('<tool_call>{"name": "get_time"}</tool_call>' * 2000), BOOK)


# Codec-claimed reasoning markers (Command-R's, Seed-OSS's, harmony's) as well as the generic ones.
CODEC_MARKERS = ["<|START_THINKING|>", "<seed:think>", "<|channel|>analysis<|message|>", "<|start|>assistant",
                 "<|START_THINKING|> a <|END_THINKING|>", "<seed:think> a </seed:think>",
                 # Command-R's call opener: a claim with a (broken) call of its own cut the Hermes call there
                 "<|START_ACTION|>", "x <|START_ACTION|>[ y", "<|START_ACTION|> a <|END_ACTION|>"]


@pytest.mark.parametrize("value", ["<think>", "[THINK]", "a <think> b </think> c", "</think> then <think>",
                                   *CODEC_MARKERS])
def test_reasoning_markup_inside_a_calls_arguments_is_the_calls_text(value: str) -> None:
    """Found by the property test: `<think>` written inside an argument cut the call at the marker (read as
    unclosed reasoning). A marker inside a call read from the whole text is part of that call (the generic
    ones: calls_outside_reasoning; the codecs' own: codecs/registry lets the call win)."""
    args = {"city": value}
    call = f'<tool_call>{{"name": "get_weather", "arguments": {json.dumps(args)}}}</tool_call>'
    for content in (call, f"Let me check.\n{call}"):
        out = assess({"role": "assistant", "content": content}, BOOK)
        assert [json.loads(c.arguments) for c in out.calls] == [args], content
        assert out.problems == ()


def test_a_call_written_inside_reasoning_is_still_no_call() -> None:
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    for content in (f"<think>I could write {call}</think>It is sunny.",
                    f"<think>{call} with <think> inside</think>Done.",
                    f"<think>unclosed, thinking of {call}"):
        out = assess({"role": "assistant", "content": content}, BOOK)
        assert out.calls == (), content


@pytest.mark.parametrize(("opener", "closer"), [("<|START_THINKING|>", "<|END_THINKING|>"),
                                                ("<seed:think>", "</seed:think>")])
def test_a_call_written_inside_a_codecs_reasoning_block_is_still_no_call(opener: str, closer: str) -> None:
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    for content in (f"{opener}I could write {call}{closer}It is sunny.", f"{opener}unclosed, thinking of {call}"):
        out = assess({"role": "assistant", "content": content}, BOOK)
        assert out.calls == (), content


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '[get_weather(city="Paris"), get_weather(city="Paris")]',
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
    '{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>'
    '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
], ids=["hermes-blocks", "pythonic-list", "kimi-section"])
def test_the_same_call_written_twice_in_one_format_is_two_calls(text: str) -> None:
    """A model may mean both (a poll, a retry); only a repeat written another way is an echo."""
    out = assess(content(text), BOOK, new_id=ids())
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [("get_weather", {"city": "Paris"})] * 2
    assert out.duplicates == () and out.content is None


def test_a_call_repeated_in_another_form_is_one_call() -> None:
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Paris"}}')
    out = assess(content(text), BOOK, new_id=ids())
    assert len(out.calls) == 1 and [d.id for d in out.duplicates] == [out.calls[0].id]
    echoed = {**native("get_weather", '{"city":"Paris"}', "kept"), "content": text.split("\n</tool_call>")[0]}
    out = assess(echoed, BOOK, new_id=ids())
    assert [c.id for c in out.calls] == ["kept"] and len(out.duplicates) == 1


def test_an_echo_of_a_native_call_written_with_other_spacing_is_still_one_call() -> None:
    """vLLM's hermes parser writes `{"city": "Paris"}`; the echo read from content is compact."""
    echoed = {**native("get_weather", '{"city": "Paris"}', "kept"),
              "content": '{"name": "get_weather", "arguments": {"city":"Paris"}}'}
    out = assess(echoed, BOOK, new_id=ids())
    assert [(c.id, c.arguments) for c in out.calls] == [("kept", '{"city": "Paris"}')] and len(out.duplicates) == 1
