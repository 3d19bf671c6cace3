"""codecs/functionary.py on its own: Functionary v3.2's recipient lines `>>>NAME\\n{json}` (MeetKai's own prompt
test, tests/prompt_test_v3.llama3.txt, verbatim), `>>>all` as text, and `render_call` read back."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import functionary

NAMES = frozenset({"get_car_price", "get_weather"})


def calls(text: str) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments)
            for f in functionary.find(text, NAMES) for c in f.candidates]


def test_two_recipient_calls_are_read() -> None:
    text = '>>>get_car_price\n{"car_name": "Song"}>>>get_car_price\n{"car_name": "Tang"}'
    assert calls(text) == [("get_car_price", {"car_name": "Song"}), ("get_car_price", {"car_name": "Tang"})]


def test_the_all_recipient_is_text() -> None:
    assert calls(">>>all\nThe temperature in Hanoi is: 10 degree Celcious") == []


def test_the_first_part_is_read_without_its_marker() -> None:
    text = 'get_weather\n{"location": "Hanoi"}'  # the generation prompt ended with `>>>`
    assert functionary.opens(text)
    assert calls(text) == [("get_weather", {"location": "Hanoi"})]
    assert not functionary.opens("The temperature in Hanoi is: 10 degree Celcious")


def test_render_call_is_read_back() -> None:
    assert calls(functionary.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_prose_is_no_call() -> None:
    assert functionary.find("Call get_car_price with the car name.", NAMES) == []
