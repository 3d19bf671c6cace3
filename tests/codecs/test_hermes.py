"""codecs/hermes.py on its own: Hermes / Qwen2.5's `<tool_call>{json}</tool_call>`, Phi-4-mini's `<|tool_call|>`
tags (source "phi"), a closing tag inside a string argument, and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import hermes
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather", "terminal"})


def calls(text: str) -> list[tuple[str, JSONValue, str]]:
    return [(c.name, c.arguments, c.source) for f in hermes.find(text, NAMES) for c in f.candidates]


def test_a_tagged_call_after_prose_is_read_and_located() -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    text = "Let me check.\n" + call
    assert calls(text) == [("get_weather", {"city": "Paris"}, "hermes")]
    (found,) = hermes.find(text, NAMES)
    assert text[found.start : found.end] == call


def test_a_closing_tag_inside_a_string_does_not_cut_the_call() -> None:
    text = '<tool_call>{"name": "terminal", "arguments": {"command": "echo </tool_call>"}}</tool_call>'
    assert calls(text) == [("terminal", {"command": "echo </tool_call>"}, "hermes")]


def test_phi_tags_are_read_as_phi() -> None:
    text = '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]<|/tool_call|>'
    assert calls(text) == [("get_weather", {"city": "Oslo"}, "phi")]


def test_render_call_is_read_back() -> None:
    assert calls(hermes.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3}, "hermes")]
