"""codecs/json_blocks.py on its own: calls written as JSON, fenced or bare, with "arguments" or another key;
braces in prose and JSON that names no offered tool are no calls."""

from __future__ import annotations

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather", "query_web_search"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in json_blocks.find(text, NAMES) for c in f.candidates]


def test_a_fenced_call_with_parameters_is_read_and_located() -> None:
    # llama3.2:3b on Ollama (ollama/ollama#13519, payload verbatim)
    text = '```json\n{"name": "query_web_search", "parameters": {"query": "install ollama models"}}\n```'
    assert calls(text) == [("query_web_search", {"query": "install ollama models"})]
    (found,) = json_blocks.find(text, NAMES)
    assert (found.start, found.end) == (0, len(text))


def test_a_bare_call_after_prose_is_read() -> None:
    text = 'Sure.\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert calls(text) == [("get_weather", {"city": "Paris"})]


def test_render_fenced_is_read_back() -> None:
    assert calls(json_blocks.render_fenced("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_json_that_names_no_offered_tool_and_braces_in_prose_are_no_calls() -> None:
    assert calls('Here is the config: {"name": "my-app", "version": 2}') == []
    assert calls("Use {x} as a placeholder [like this].") == []


def test_a_json_list_whose_bracket_never_closes_takes_its_bracket_with_the_calls() -> None:
    """A list cut short of its `]` (a shape the peers' suites feed their parsers): no `[` is left in content."""
    text = 'Here.\n[{"name": "get_weather", "arguments": {"city": "Paris"}}'
    (found,) = json_blocks.find(text, NAMES)
    assert text[found.start :] == text[len("Here.\n") :]
    closed = '[{"name": "get_weather", "arguments": {"city": "Paris"}}] and [1'
    assert [closed[f.start] for f in json_blocks.find(closed, NAMES)] == ["["]


def test_a_json_object_beside_a_call_that_calls_no_offered_tool_stays_text() -> None:
    """A bare object, then a call (Ollama keeps the first as text): only the call leaves content. A
    call-shaped object naming no offered tool beside a call is still a call, for tier 2 to ask about
    (tests/corpus/echoes.json, atwmarshall/dead-reckoning#30)."""
    from sanctum_proxy.repair.mend import assess
    from sanctum_proxy.repair.toolbox import Toolbox

    book = Toolbox.from_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}])
    for first in ('{"status": "ok", "count": 3}', '{"city": "Paris"}', '{"answer": 42}'):
        call = '\n{"name": "get_weather", "arguments": {"city": "Rome"}}'
        out = assess({"role": "assistant", "content": first + call}, book)
        assert [(c.name, c.arguments) for c in out.calls] == [("get_weather", '{"city":"Rome"}')]
        assert (out.content, out.problems) == (first, ())
