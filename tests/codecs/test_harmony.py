"""codecs/harmony.py on its own: gpt-oss's channels (vLLM's test_openai_tool_parser.py, verbatim): the analysis
channel is reasoning, never read for calls; the commentary call is read; `render_call` is read back."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import harmony

NAMES = frozenset({"get_current_weather", "get_weather"})
ANALYSIS = 'User asks: "What is the weather in Tokyo?" We need to use get_current_weather tool.'


def calls(text: str) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments)
            for f in harmony.find(text, NAMES) for c in f.candidates]


def test_analysis_is_reasoning_and_the_commentary_call_is_read() -> None:
    text = (f"<|channel|>analysis<|message|>{ANALYSIS}<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_current_weather <|constrain|>json<|message|>{"location": "Tokyo"}<|call|>')
    assert calls(text) == [("get_current_weather", {"location": "Tokyo"})]
    assert [f.reasoning for f in harmony.find(text, NAMES) if f.reasoning] == [ANALYSIS]


def test_render_call_is_read_back() -> None:
    assert calls(harmony.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_prose_is_no_call() -> None:
    assert harmony.find("The commentary says to use functions wisely.", NAMES) == []
