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


def test_a_list_whose_bracket_never_closes_is_read_and_its_bracket_goes_with_it() -> None:
    """A list cut short of its `]` (a shape the peers' suites feed their parsers): the `[` is the calls' markup."""
    for text in ('[get_weather(location="Paris")', 'Sure. [get_weather(location="Paris"), search_web(query="x")',
                 '[\n  get_weather(location="Paris")\n'):
        found = pythonic.find(text, NAMES)
        assert [c.name for f in found for c in f.candidates][:1] == ["get_weather"], text
        assert text[found[0].start] == "[" and not text[found[-1].end :].strip(), text


def test_an_unclosed_list_with_prose_after_it_is_prose() -> None:
    assert calls('See [get_weather(location="Paris") and more') == []
