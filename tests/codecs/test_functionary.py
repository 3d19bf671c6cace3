"""codecs/functionary.py on its own: Functionary v3.2's recipient lines `>>>NAME\\n{json}` (llama.cpp's
test-chat.cpp and PR 9639, verbatim), `>>>all` as text, and `render_call` read back."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import functionary

NAMES = frozenset({"special_function", "get_weather"})


def calls(text: str) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments)
            for f in functionary.find(text, NAMES) for c in f.candidates]


def test_two_recipient_calls_are_read() -> None:
    text = '>>>special_function\n{"arg1": 1}\n>>>special_function\n{"arg1": 2}'
    assert calls(text) == [("special_function", {"arg1": 1}), ("special_function", {"arg1": 2})]


def test_the_all_recipient_is_text() -> None:
    assert calls(">>>all\nHello, world!\nWhat's up?") == []


def test_the_first_part_is_read_without_its_marker() -> None:
    text = 'special_function\n{"arg1": 1}'  # the generation prompt ended with `>>>`
    assert functionary.opens(text)
    assert calls(text) == [("special_function", {"arg1": 1})]
    assert not functionary.opens("Hello, world!")


def test_render_call_is_read_back() -> None:
    assert calls(functionary.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_prose_is_no_call() -> None:
    assert functionary.find("Call special_function with arg1.", NAMES) == []
