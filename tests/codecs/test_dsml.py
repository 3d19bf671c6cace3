"""codecs/dsml.py on its own: DeepSeek-V3.2's DSML block as its encoding_dsv32.py writes it (sglang issue 40236,
verbatim), typed by each parameter's `string` attribute, and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import dsml
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in dsml.find(text, NAMES) for c in f.candidates]


def test_a_dsml_block_is_read_with_typed_parameters() -> None:
    text = ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
            "</｜DSML｜invoke>\n</｜DSML｜function_calls>")
    assert calls(text) == [("get_weather", {"city": "Paris", "days": 3})]


def test_render_call_is_read_back() -> None:
    arguments: JSONValue = {"city": "Paris", "days": 3, "units": ["c"]}
    assert calls(dsml.render_call("get_weather", arguments)) == [("get_weather", arguments)]


def test_prose_is_no_call() -> None:
    assert dsml.find("The invoke name is get_weather.", NAMES) == []
