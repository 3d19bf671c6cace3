"""codecs/step3.py on its own: Step3's `<steptml:invoke>` calls between special tokens (vLLM's
test_step3_tool_parser.py), inline values kept whole, and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import step3
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather", "get_time"})
B, E = "<｜tool_calls_begin｜><｜tool_call_begin｜>", "<｜tool_call_end｜><｜tool_calls_end｜>"


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in step3.find(text, NAMES) for c in f.candidates]


def test_two_calls_in_one_section_are_read_and_the_section_is_markup() -> None:
    text = (f'Let me check.\n{B}<steptml:invoke name="get_weather"><steptml:parameter name="city">Tokyo'
            '</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_sep｜><｜tool_call_begin｜>'
            f'<steptml:invoke name="get_time"><steptml:parameter name="tz">Asia/Tokyo</steptml:parameter>'
            f'</steptml:invoke>{E}\nDone.')
    assert calls(text) == [("get_weather", {"city": "Tokyo"}), ("get_time", {"tz": "Asia/Tokyo"})]
    (found,) = step3.find(text, NAMES)
    assert text[: found.start] == "Let me check.\n" and text[found.end :] == "\nDone."


def test_an_inline_value_keeps_its_whitespace() -> None:
    text = (f'{B}function<｜tool_sep｜>get_weather\n<steptml:invoke name="get_weather">'
            f'<steptml:parameter name="city">  Tokyo\n</steptml:parameter></steptml:invoke>{E}')
    assert calls(text) == [("get_weather", {"city": "  Tokyo\n"})]


def test_render_call_is_read_back_as_strings() -> None:
    assert calls(step3.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": "3"})]
