"""core/calls.py: a message content as text, the ids of calls the proxy makes, and the example arguments prompts
show for a tool."""

from __future__ import annotations

import re

from sanctum_proxy.core.calls import Assessment, Problem, content_text, example_arguments, new_call_id


def test_content_text_reads_strings_and_text_parts() -> None:
    assert content_text("hello") == "hello"
    parts = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"text": "b"}, "c"]
    assert content_text(parts) == "ab"
    assert content_text(None) == ""
    assert content_text(3) == ""


def test_new_call_ids_look_like_openai_ids_and_differ() -> None:
    ids = {new_call_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids)


def test_example_arguments_take_the_first_two_properties() -> None:
    schema = {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"},
        "city": {"type": "string"}}}
    assert example_arguments(schema) == {"unit": "celsius", "days": 1}
    assert example_arguments({"properties": {"x": {"type": "number"}, "y": {}}}) == {"x": 1.5, "y": "..."}
    assert example_arguments({"type": "object"}) == {}


def test_an_assessment_is_ok_without_problems() -> None:
    assert Assessment(calls=(), content=None).ok
    problem = Problem("unknown_spell", "get_time", ("unknown tool 'get_time'",), "")
    assert not Assessment(calls=(), content=None, problems=(problem,)).ok
