"""codecs/functiongemma.py on its own: FunctionGemma's `<escape>`-quoted calls (vLLM's
test_functiongemma_tool_parser.py), values as text, and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import functiongemma
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"search"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in functiongemma.find(text, NAMES) for c in f.candidates]


def test_escaped_and_bare_values_are_text_and_commas_may_be_missing() -> None:
    text = "<start_function_call>call:search{query:<escape>a, b<escape>limit:10}<end_function_call>"
    assert calls(text) == [("search", {"query": "a, b", "limit": "10"})]


def test_arguments_that_do_not_read_go_on_as_written() -> None:
    assert calls("<start_function_call>call:search{query:<escape>open}<end_function_call>") == [
        ("search", "{query:<escape>open}")]


def test_render_call_is_read_back() -> None:
    assert calls(functiongemma.render_call("search", {"query": "cats", "limit": 3})) == [
        ("search", {"query": "cats", "limit": "3"})]
