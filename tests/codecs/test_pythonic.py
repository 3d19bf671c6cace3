"""codecs/pythonic.py on its own: Granite's Python-style calls one to a line (vLLM issue 43116, verbatim), a call
mentioned inside a sentence is prose, and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import pythonic
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather", "search_web"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in pythonic.find(text, NAMES) for c in f.candidates]


def test_bare_calls_one_to_a_line_are_read() -> None:
    text = 'get_weather(location="San Francisco", unit="celsius")\nsearch_web(query="vLLM release notes")'
    assert calls(text) == [("get_weather", {"location": "San Francisco", "unit": "celsius"}),
                           ("search_web", {"query": "vLLM release notes"})]


def test_a_call_mentioned_in_a_sentence_is_prose() -> None:
    assert calls('You could run get_weather(location="Paris") yourself to see it.') == []


def test_render_call_is_read_back() -> None:
    arguments: JSONValue = {"city": "Paris", "days": 3, "hourly": True, "tags": ["a"]}
    assert calls(pythonic.render_call("get_weather", arguments)) == [("get_weather", arguments)]
