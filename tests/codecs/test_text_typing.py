"""Values a text-only format wrote, typed by the tool's schema as llama.cpp types them (repair/validate.py's
`_coerce_value`): the schema's types other than string first, anyOf / oneOf branches, type aliases; and the
layout of each format (Qwen3-Coder's block-set tags lose their padding, an inline value keeps its own)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox


def read(schema: dict[str, Any], value: str, layout: str = "\n{}\n") -> Any:
    book = Toolbox.from_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"v": schema}}}}])
    text = f"<tool_call>\n<function=f>\n<parameter=v>{layout.format(value)}</parameter>\n</function>\n</tool_call>"
    out = assess({"role": "assistant", "content": text}, book, asked_format="qwen_xml")
    assert not out.problems, out.problems
    return json.loads(out.calls[0].arguments)["v"]


@pytest.mark.parametrize(("schema", "value", "typed"), [
    ({"type": ["string", "null"]}, "null", None),
    ({"type": ["string", "integer"]}, "7", 7),
    ({"type": ["string", "null"]}, "text", "text"),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "12", 12),
    ({"oneOf": [{"type": "boolean"}, {"type": "string"}]}, "true", True),
    ({"type": "float"}, "3.14", 3.14),
    ({"type": "integer"}, " 4 ", 4),
    ({"type": "integer"}, "018956", 18956),
    ({"type": "array"}, '[{\\"id\\": 1}]', [{"id": 1}]),
])
def test_a_text_value_is_typed_by_the_schema(schema: dict[str, Any], value: str, typed: Any) -> None:
    assert read(schema, value) == typed


def test_a_string_stays_the_text_written() -> None:
    assert read({"type": "string"}, "null") == "null"


def test_block_set_tags_lose_their_padding_and_an_inline_value_keeps_its_newline() -> None:
    assert read({"type": "string"}, "        Dallas", "\n{}\n        ") == "Dallas"
    assert read({"type": "string"}, "    if x:\n        y", "\n{}\n") == "    if x:\n        y"
    assert read({"type": "string"}, "old line\n", "{}") == "old line\n"
