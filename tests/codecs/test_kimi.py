"""codecs/kimi.py on its own: Kimi K2's tool-call section between prose (vLLM PR 31207's test text), the
`functions.NAME:INDEX` id read for the name, and `render_call` read back."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import kimi
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

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


def _tool(name: str, *keys: str) -> dict[str, object]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {k: {"type": "string"} for k in keys}}}}


def test_a_bare_counter_among_several_tools_names_the_one_whose_keys_fit() -> None:
    """vLLM's test_bare_counter_multiple_tools_infers_by_args and _skips_unsafe_inference: several tools fitting
    the keys, or arguments that do not read, name none (tier 2 asks)."""
    section = ("Let me check. <|tool_calls_section_begin|><|tool_call_begin|>0 <|tool_call_argument_begin|>{}"
               "<|tool_call_end|><|tool_calls_section_end|>")
    weather, read_file, flight = _tool("get_weather", "city", "unit"), _tool("read_file", "path"), \
        _tool("book_flight", "city")
    fits = assess({"role": "assistant", "content": section.replace("{}", '{"city": "Tokyo", "unit": "c"}')},
                  Toolbox.from_tools([read_file, weather]))
    assert [(c.name, json.loads(c.arguments)) for c in fits.calls] == [("get_weather", {"city": "Tokyo", "unit": "c"})]
    assert fits.content == "Let me check."
    for args in ('{"city": "Tokyo"}', '{"city": "Tokyo"'):
        out = assess({"role": "assistant", "content": section.replace("{}", args)},
                     Toolbox.from_tools([weather, flight]))
        assert not out.calls and [p.reason for p in out.problems] == ["unknown_spell"]
