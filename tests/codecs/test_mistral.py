"""codecs/mistral.py on its own: `[TOOL_CALLS]` with a list of calls, here Mistral-7B's single-quoted Python dicts
followed by junk prose (vLLM PR 5649, verbatim), and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import mistral
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_current_weather", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in mistral.find(text, NAMES) for c in f.candidates]


def test_single_quoted_parallel_calls_with_trailing_prose_are_read() -> None:
    text = ("[TOOL_CALLS][{'name': 'get_current_weather', 'arguments': {'city': 'Dallas', 'state': 'TX', 'unit': "
            "'fahrenheit'}}, {'name': 'get_current_weather', 'arguments': {'city': 'San Francisco', 'state': 'CA', "
            "'unit': 'fahrenheit'}}]$$ In order to execute these functions, I need to provide the current weather API.")
    assert calls(text) == [
        ("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}),
        ("get_current_weather", {"city": "San Francisco", "state": "CA", "unit": "fahrenheit"}),
    ]


def test_render_call_is_read_back() -> None:
    assert calls(mistral.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_prose_is_no_call() -> None:
    assert mistral.find("Mistral writes TOOL_CALLS before its calls.", NAMES) == []


def test_small_32_call_id_is_kept_and_the_closer_is_markup() -> None:
    text = 'Checking.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}[/TOOL_CALLS] Done.'
    (found,) = mistral.find(text, NAMES)
    assert [(c.name, c.id, c.arguments) for c in found.candidates] == [
        ("get_weather", "a1b2c3d4e", '{"city": "Paris"}')]
    assert text[: found.start] + text[found.end :] == "Checking. Done."


def test_words_between_the_tag_and_the_list_are_markup() -> None:
    text = '[TOOL_CALLS]  junk [{"name": "get_weather", "arguments": {"city": "Paris"}}] trail'
    (found,) = mistral.find(text, NAMES)
    assert text[found.end :] == " trail" and len(found.candidates) == 1
