"""Prompted mode's rewriting: the upstream never sees tools, tool_calls or role tool."""

from __future__ import annotations

import pytest

from sanctum_proxy.codecs import families
from sanctum_proxy.core.calls import Tool, example_text, is_example_hint
from sanctum_proxy.repair.prompted import (
    compact_schema,
    rewrite_history,
    system_section,
    to_prompted,
    without_result_tags,
)


class Book:
    def __init__(self, *tools: Tool) -> None:
        self.tools = {s.name: s for s in tools}


WEATHER = Tool("get_weather", "Weather for a city",
                {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def test_history_with_two_tool_rounds_and_an_error_becomes_text():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "error: service down"},
        {"role": "assistant", "content": "Paris is 18C; Rome failed."},
    ]
    body = to_prompted({"model": "m", "messages": history, "tools": [{}], "tool_choice": "auto",
                        "parallel_tool_calls": True}, Book(WEATHER), "hermes")
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert body["messages"][0]["content"].startswith("Be brief.\n\n# Tools")
    assert '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>' in \
        body["messages"][2]["content"]
    results = body["messages"][3]["content"]
    assert '<tool_response name="get_weather" id="c1">\n18C' in results and "error: service down" in results
    assert all("tool_calls" not in m for m in body["messages"])


def test_broken_arguments_in_history_are_kept_as_written():
    out = rewrite_history([{"role": "assistant", "tool_calls": [
        {"id": "x", "function": {"name": "f", "arguments": "{'a': 1,"}}]}], "hermes")
    assert "{'a': 1," in out[0]["content"]


def test_system_section_lists_schemas_and_the_format():
    text = system_section(Book(WEATHER), "json", required="get_weather")
    shown = '  arguments: {"properties":{"city":{"type":"string"}},"required":["city"]}'  # an object: no "type"
    assert "get_weather" in text and shown in text
    assert "```json" in text and "must answer with a call to get_weather" in text


def test_a_schema_in_the_prompt_keeps_what_a_model_reads_and_drops_metadata():
    # opencode's and goose's schemas as they send them: $schema, titles, additionalProperties, default null
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "FileWriteParams", "type": "object",
              "additionalProperties": False, "required": ["path"],
              "properties": {"path": {"type": "string", "description": "Where", "title": "Path"},
                             "title": {"type": ["string", "null"], "default": None},  # a property named title stays
                             "mode": {"enum": ["a", "w"], "default": "w"},
                             "n": {"type": "integer", "format": "uint64", "minimum": 0},
                             "tags": {"type": "array", "items": {"type": "string", "title": "Tag"}},
                             "ref": {"$ref": "#/$defs/Kind"}},
              "$defs": {"Kind": {"title": "Kind", "anyOf": [{"const": "x", "title": "X"}, {"type": "null"}]}}}
    assert compact_schema(schema) == {
        "type": "object", "required": ["path"],
        "properties": {"path": {"type": "string", "description": "Where"}, "title": {"type": ["string", "null"]},
                       "mode": {"enum": ["a", "w"], "default": "w"},
                       "n": {"type": "integer", "format": "uint64", "minimum": 0},
                       "tags": {"type": "array", "items": {"type": "string"}}, "ref": {"$ref": "#/$defs/Kind"}},
        "$defs": {"Kind": {"anyOf": [{"const": "x"}, {"type": "null"}]}}}
    empty = system_section(Book(Tool("now", None, {"type": "object", "properties": {}, "additionalProperties": False})),
                           "hermes")
    assert "- now: (no description)\n  arguments: {}" in empty


BMI = Tool("bmi", "Body mass index", {"type": "object", "required": ["weight", "height"], "properties": {
    "weight": {"type": "number"}, "height": {"type": "integer"}, "unit": {"type": "string", "enum": ["kg", "lb"]}}})


def test_the_example_call_shows_type_hints_not_values():
    # A model under a grammar copied the example's values (issue 31: Gemma 3 270M wrote {"weight":1,"height":1}
    # in 40 of 48 calls): the example shows the schema's own names with a hint of each type, no JSON value.
    text = system_section(Book(BMI), "hermes", required="any")
    assert '{"name": "bmi", "arguments": {"weight":<number>,"height":<integer>}}' in text
    # Where text may win, placeholder values: grounding catches a copied 1.5 or "..." (repair/grounding).
    assert '{"name": "bmi", "arguments": {"weight":1.5,"height":1}}' in system_section(Book(BMI), "hermes")
    assert example_text({"type": "object", "properties": {"unit": BMI.parameters["properties"]["unit"],
                                                          "tags": {"type": "array"}, "x": {}}}) == \
        '{"unit":<one of "kg", "lb">,"tags":<array>}'
    assert example_text({"type": "object", "properties": {"n": {"enum": [1, 2, 3, 4, 5]}}}) == \
        '{"n":<one of 1, 2, 3, 4, ...>}'
    assert example_text({"type": "object", "properties": {"a": {}, "b": {"type": ["string", "null"]}}}) == \
        '{"a":<value>,"b":<value>}'
    assert example_text({"type": "object"}) == example_text(None) == "{}"


@pytest.mark.parametrize(("fmt", "shown"), [
    ("pythonic", "[bmi(weight=<number>, height=<integer>)]"),
    ("qwen_xml", "<parameter=weight>\n<number>\n</parameter>"),
    ("glm", "<arg_value><integer></arg_value>"),
])
def test_every_call_format_shows_the_hints_in_its_own_shape(fmt, shown):
    text = system_section(Book(BMI), fmt, required="bmi")
    assert shown in text and "@@" not in text


def test_a_hint_is_told_from_a_value():
    assert is_example_hint("<string>") and is_example_hint(' <one of "kg", "lb"> ') and is_example_hint("<value>")
    assert not any(is_example_hint(v) for v in ("kg", "<b>bold</b>", "...", 1.5, "<html>", None))


def test_tool_choice_none_offers_no_tools():
    body = to_prompted({"messages": [{"role": "user", "content": "hi"}], "tools": [{}]}, None, "hermes")
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_echoed_result_tags_go_and_their_text_stays() -> None:
    echoed = families.render_result("hermes", "get_weather", "call_1", "Paris: sunny, 21 C")
    assert echoed.startswith('<tool_response name="get_weather" id="call_1">')
    assert without_result_tags(echoed) == "Paris: sunny, 21 C"
    assert without_result_tags(f"It says:\n{echoed}\nEnjoy.") == "It says:\nParis: sunny, 21 C\nEnjoy."
    assert without_result_tags("<tool_response>\nParis: sunny\n</tool_response>") == "Paris: sunny"
    assert without_result_tags('<tool_response name="get_weather">\nParis: sunny') == "Paris: sunny"  # cut


def test_text_without_result_tags_is_untouched() -> None:
    for text in (None, "", "  Paris: sunny.  ", " a <tool_response_x> tag ", 'I said <tool_response name="x"'):
        assert without_result_tags(text) == text
