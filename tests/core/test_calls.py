"""core/calls.py: a message content as text, the ids of calls the proxy makes, and the example arguments prompts
show for a tool."""

from __future__ import annotations

import re

from sanctum_proxy.core.calls import Assessment, Problem, content_text, example_text, is_example_hint, new_call_id


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


def test_the_example_takes_the_first_two_properties_as_placeholders_or_hints() -> None:
    schema = {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"},
        "city": {"type": "string"}}}
    assert example_text(schema, hints=False) == '{"unit":"celsius","days":1}'
    assert example_text({"properties": {"x": {"type": "number"}, "y": {}}}, hints=False) == '{"x":1.5,"y":"..."}'
    assert example_text({"type": "object"}, hints=False) == "{}"
    hinted = example_text(schema)
    assert '"days":<integer>' in hinted and "city" not in hinted and "celsius" in hinted  # enum: <one of ...>


def test_a_hint_is_told_from_a_value() -> None:
    assert is_example_hint("<string>") and is_example_hint('<one of "kg", "lb">')
    assert is_example_hint("<string>,")  # a copy the model ran on past (Gemma 3, BFCL simple_python_60)
    assert not is_example_hint("<string>com.example.app</string>")  # a plist's line is a value
    assert not is_example_hint("Paris") and not is_example_hint("<b>bold</b>") and not is_example_hint(5)


def test_an_assessment_is_ok_without_problems() -> None:
    assert Assessment(calls=(), content=None).ok
    problem = Problem("unknown_spell", "get_time", ("unknown tool 'get_time'",), "")
    assert not Assessment(calls=(), content=None, problems=(problem,)).ok
