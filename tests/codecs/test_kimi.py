"""codecs/kimi.py on its own: Kimi K2's tool-call section between prose (vLLM PR 31207's test text), the
`functions.NAME:INDEX` id read for the name, and `render_call` read back."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import kimi

NAMES = frozenset({"get_weather"})


def calls(text: str) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments)
            for f in kimi.find(text, NAMES) for c in f.candidates]


def test_a_section_between_prose_is_read_and_only_it_is_markup() -> None:
    section = ('<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
               '{"location": "Tokyo", "units": "celsius"}<|tool_call_end|>\n<|tool_calls_section_end|>')
    text = f"Let me help you with that.\n{section}\nThe weather in Tokyo is..."
    assert calls(text) == [("get_weather", {"location": "Tokyo", "units": "celsius"})]
    assert [text[f.start : f.end] for f in kimi.find(text, NAMES)] == [section]


def test_render_call_is_read_back() -> None:
    assert calls(kimi.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_prose_is_no_call() -> None:
    assert kimi.find("functions.get_weather:0 is how Kimi names a call.", NAMES) == []


def test_a_bare_counter_id_names_the_one_offered_tool() -> None:
    text = ("Let me check. <|tool_calls_section_begin|><|tool_call_begin|>0 <|tool_call_argument_begin|>"
            '{"city": "Tokyo"}<|tool_call_end|><|tool_calls_section_end|>')
    assert [(c.name, c.arguments) for f in kimi.find(text, frozenset({"get_weather"})) for c in f.candidates] == [
        ("get_weather", '{"city": "Tokyo"}')]
    assert [c.name for f in kimi.find(text, frozenset({"get_weather", "read_file"})) for c in f.candidates] == ["0"]


def test_noise_in_a_section_an_empty_section_and_k3s_closer_are_markup() -> None:
    text = ("A <|tool_calls_section_begin|> noise <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}"
            "<|tool_call_end|><|tool_calls_section_end|> B <|tool_calls_section_begin|><|tool_calls_section_end|>"
            " C<|close|>message<|sep|>")
    found = kimi.find(text, frozenset({"f"}))
    rest, pos = [], 0
    for f in found:
        rest.append(text[pos : f.start])
        pos = f.end
    assert "".join(rest) + text[pos:] == "A  B  C"
