"""codecs/deepseek.py on its own: DeepSeek-V3's call tokens left in content (sglang issue 4379, verbatim but for
the second city, cut in the report), the fenced JSON kept for tier 1 to read, and `render_call` read back."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import deepseek
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_current_weather", "get_weather"})
FENCED = "```json\n{}\n```"


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in deepseek.find(text, NAMES) for c in f.candidates]


def test_two_calls_in_one_block_are_read_with_their_fenced_arguments() -> None:
    text = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_current_weather\n```json\n"
            '{"location": "Tokyo"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>'
            'get_current_weather\n```json\n{"location": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
    assert calls(text) == [("get_current_weather", FENCED.replace("{}", '{"location": "Tokyo"}')),
                           ("get_current_weather", FENCED.replace("{}", '{"location": "Paris"}'))]
    found = deepseek.find(text, NAMES)
    assert (found[0].start, found[-1].end) == (0, len(text))


def test_render_call_is_read_back() -> None:
    ((name, arguments),) = calls(deepseek.render_call("get_weather", {"city": "Paris", "days": 3}))
    assert name == "get_weather"
    assert isinstance(arguments, str)
    assert json.loads(arguments.removeprefix("```json\n").removesuffix("\n```")) == {"city": "Paris", "days": 3}


def test_prose_is_no_call() -> None:
    assert deepseek.find("function get_current_weather takes a location.", NAMES) == []
