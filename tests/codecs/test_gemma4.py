"""codecs/gemma4.py on its own: Gemma 4's `<|tool_call>call:NAME{...}<tool_call|>` with its `<|"|>` string quotes
(oMLX issue 593 and mlx-lm PR 1105, verbatim), and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import gemma4
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"bash", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in gemma4.find(text, NAMES) for c in f.candidates]


def test_a_call_with_quote_tokens_is_read() -> None:
    assert calls('<|tool_call>call:bash{command:<|"|>ls -la<|"|>}<tool_call|>') == [("bash", {"command": "ls -la"})]


def test_two_calls_are_read_in_order() -> None:
    text = ('<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>'
            '<|tool_call>call:bash{command:<|"|>date<|"|>}<tool_call|>')
    assert calls(text) == [("get_weather", {"location": "Paris"}), ("bash", {"command": "date"})]


def test_render_call_is_read_back() -> None:
    arguments: JSONValue = {"city": "Paris", "days": 3, "hourly": False, "tags": ["a", "b"]}
    assert calls(gemma4.render_call("get_weather", arguments)) == [("get_weather", arguments)]


def test_prose_is_no_call() -> None:
    assert calls("I will call bash to list the files.") == []
