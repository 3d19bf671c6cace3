"""codecs/minicpm.py on its own: MiniCPM 5's `<function name=...><param name=...>` calls (vLLM's
test_minicpm5xml_tool_parser.py), CDATA values, the byte-level tokenizer's spacing, and wrapped arguments."""

from __future__ import annotations

from sanctum_proxy.codecs import minicpm
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in minicpm.find(text, NAMES) for c in f.candidates]


def test_a_call_with_prose_around_is_read() -> None:
    text = 'Intro.\n<function name="get_weather"><param name="city">上海</param></function>\nOutro.'
    assert calls(text) == [("get_weather", {"city": "上海"})]


def test_a_cdata_value_is_its_text() -> None:
    text = '<function name="get_weather"><param name="city"><![CDATA[北\n京]]></param></function>'
    assert calls(text) == [("get_weather", {"city": "北\n京"})]


def test_collapsed_and_byte_level_spacing_read_alike() -> None:
    for space in ("", "\u0120"):
        text = f'<function{space}name="get_weather"><param{space}name="city">Rome</param></function>'
        assert calls(text) == [("get_weather", {"city": "Rome"})]


def test_the_whole_object_in_a_lone_arguments_parameter_is_the_arguments() -> None:
    text = '<function name="get_weather"><param name="properties">{\'city\': \'Rome\'}</param></function>'
    assert calls(text) == [("get_weather", {"city": "Rome"})]


def test_a_function_never_closed_is_not_read() -> None:
    assert calls('<function name="get_weather"><param name="city">Rome</param>') == []


def test_render_call_is_read_back() -> None:
    assert calls(minicpm.render_call("get_weather", {"city": "Paris"})) == [("get_weather", {"city": "Paris"})]


def test_a_call_whose_parameters_cannot_be_read_is_a_broken_call_not_text() -> None:
    text = '<function name="get_weather"><param name="<">x</param></function>'
    assert calls(text) == [("get_weather", '<param name="<">x</param>')]  # judged as broken arguments
    assert calls('I could use <function name="get_weather"> here.') == []  # a tag named in prose
