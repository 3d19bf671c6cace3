"""Formats that write every parameter as text between tags (Qwen3-Coder's and Seed-OSS's `<parameter=k>`, GLM's
`<arg_value>`, MiniMax's `<parameter name="k">`: Codec.text_values) have no way to write 5 but "5": typing such a
value by the schema is reading the format, not a mend, so it is no omen. A format that can write types (JSON,
DSML's `string="false"`, the JSON inside a text value) writing "5" for an integer is still `coerced_integer`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sanctum_proxy.codecs.registry import TEXT_VALUED, render_call
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import TYPED_FROM_TEXT, coerce
from tests.codecs.test_corpus import CASES

BOOK = Toolbox.from_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "ratio": {"type": "number"},
        "metric": {"type": "boolean"}, "note": {"type": ["string", "null"]},
        "ids": {"type": "array", "items": {"type": "integer"}}}}}}])
ARGS = {"city": "Paris", "days": 5, "ratio": 0.5, "metric": True, "ids": [1, 2]}


def content(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def omens(out: Any) -> set[str]:
    return {name for repair in out.repairs for name in repair.repairs}


@pytest.mark.parametrize("fmt", sorted(TEXT_VALUED))
def test_a_call_written_exactly_as_a_text_format_asks_is_no_mend(fmt: str) -> None:
    text = render_call(fmt, "get_weather", ARGS)
    assert '5' in text and '"5"' not in text  # the format writes the integer as bare text
    out = assess(content(text), BOOK, asked_format=fmt)
    assert [json.loads(c.arguments) for c in out.calls] == [ARGS]
    assert out.repairs == (), omens(out)  # was ('coerced_integer', 'coerced_number', ...)


def test_the_same_text_call_unasked_is_reported_only_as_a_call_in_content() -> None:
    out = assess(content(render_call("qwen_xml", "get_weather", ARGS)), BOOK)
    assert [json.loads(c.arguments) for c in out.calls] == [ARGS]
    assert omens(out) == {"qwen_xml_in_content"}


@pytest.mark.parametrize("fmt", ["hermes", "json", "mistral"])
def test_a_json_format_writing_an_integer_as_a_string_is_still_coerced(fmt: str) -> None:
    out = assess(content(render_call(fmt, "get_weather", {"city": "Paris", "days": "5"})), BOOK, asked_format=fmt)
    assert json.loads(out.calls[0].arguments)["days"] == 5
    assert "coerced_integer" in omens(out)


def test_json_inside_a_text_value_keeps_its_own_omens() -> None:
    """The array is JSON written as text (no omen), but its items were written as strings: that is the model's."""
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            '<parameter=ids>\n["1", "2"]\n</parameter>\n</function>\n</tool_call>')
    out = assess(content(text), BOOK, asked_format="qwen_xml")
    assert json.loads(out.calls[0].arguments) == {"city": "Paris", "ids": [1, 2]}
    assert omens(out) == {"coerced_integer"}


def test_functionary_v31_json_body_read_by_the_same_codec_is_still_coerced() -> None:
    text = '<function=get_weather>{"city": "Paris", "days": "5"}</function>'
    out = assess(content(text), BOOK, asked_format="functionary_v31")
    assert json.loads(out.calls[0].arguments) == {"city": "Paris", "days": 5}
    assert "coerced_integer" in omens(out)


def test_dsml_string_true_for_an_integer_is_still_coerced() -> None:
    """DSML says each value's kind (`string="false"` for JSON): "5" marked as a string is the model's choice."""
    text = ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="days" string="true">5</｜DSML｜parameter>\n'
            '</｜DSML｜invoke>\n</｜DSML｜function_calls>')
    out = assess(content(text), BOOK, asked_format="dsml")
    assert json.loads(out.calls[0].arguments) == {"city": "Paris", "days": 5}
    assert "coerced_integer" in omens(out)


def test_text_that_is_not_cleanly_the_type_is_still_a_problem() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" \
           "<parameter=days>\nfive\n</parameter>\n</function>\n</tool_call>"
    out = assess(content(text), BOOK, asked_format="qwen_xml")
    assert out.calls == () and [p.reason for p in out.problems]


def test_coerce_as_text_names_only_what_is_not_the_formats_own_typing() -> None:
    schema = BOOK.tools["get_weather"].parameters
    value, repairs = coerce({"days": "5", "metric": "true", "ids": "['1', 2]"}, schema, as_text=True)
    assert value == {"days": 5, "metric": True, "ids": [1, 2]}
    assert set(repairs) == {"single_quotes", "coerced_integer"}  # Python quoting, and the quoted item
    assert not set(repairs) & TYPED_FROM_TEXT - {"coerced_integer"}


FORMAT_OF = {"glm": "glm", "minimax": "minimax", "qwen3coder": "qwen_xml", "seed": "seed"}  # corpus file: format
TYPED = {"glm:glm45-integer-value-01", "minimax:minimax-m2-think-closer-then-call-01",
         "qwen3coder:qwen3coder-xml-python-bool-01", "minimax:minimax-m25-guide-array-values-01",
         "qwen3coder:qwen3coder-xml-unwrapped-in-content-01"}


@pytest.mark.parametrize("param", [pytest.param(p, id=p.id) for p in CASES if p.id.split(":")[0] in FORMAT_OF])
def test_corpus_text_format_answers_as_asked_carry_no_typing_omen(param: Any) -> None:
    tools, case = param.values
    book = Toolbox.from_tools(tools)
    fmt = FORMAT_OF[param.id.split(":")[0]]
    out = assess(case["message"], book, finish_reason=case.get("finish_reason"), asked_format=fmt)
    assert [{"name": c.name, "arguments": json.loads(c.arguments)} for c in out.calls] == case["expect"]["calls"]
    assert not omens(out) & TYPED_FROM_TEXT, omens(out)
    if param.id in TYPED:  # these reported coerced_integer, coerced_number, coerced_boolean or decoded_json_string
        plain = assess(case["message"], book, finish_reason=case.get("finish_reason"))
        assert omens(plain) == {f"{fmt}_in_content"} | omens(out)
