"""codecs/minimax_m3.py on its own: MiniMax-M3's namespaced nested XML (vLLM's test_minimax_m3_tool_parser.py)."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import minimax_m3
from sanctum_proxy.codecs.minimax_m3 import NS
from sanctum_proxy.core.shapes import JSONValue
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

NAMES = frozenset({"create_order"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in minimax_m3.find(text, NAMES) for c in f.candidates]


def test_nested_elements_are_objects_and_item_lists_are_lists() -> None:
    text = (f'{NS}<tool_call>\n{NS}<invoke name="create_order">{NS}<shipping>{NS}<zip>018956{NS}</zip>{NS}</shipping>'
            f"{NS}<items>{NS}<item>{NS}<qty>2{NS}</qty>{NS}</item>{NS}<item>{NS}<qty>5{NS}</qty>{NS}</item>{NS}</items>"
            f"{NS}<tags>{NS}<tag>a{NS}</tag>{NS}<tag>b{NS}</tag>{NS}</tags>{NS}</invoke>\n{NS}</tool_call>")
    assert calls(text) == [("create_order", {"shipping": {"zip": "018956"}, "items": [{"qty": "2"}, {"qty": "5"}],
                                             "tags": {"tag": ["a", "b"]}})]


def test_the_leaves_are_typed_by_the_schema_through_the_nesting() -> None:
    book = Toolbox.from_tools([{"type": "function", "function": {"name": "create_order", "parameters": {
        "type": "object", "properties": {
            "shipping": {"type": "object", "properties": {"zip": {"type": "integer"}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer"}}}}}}}}])
    text = (f'{NS}<tool_call>\n{NS}<invoke name="create_order">{NS}<shipping>{NS}<zip>018956{NS}</zip>{NS}</shipping>'
            f"{NS}<items>{NS}<item>{NS}<qty>2{NS}</qty>{NS}</item>{NS}</items>{NS}</invoke>\n{NS}</tool_call>")
    out = assess({"role": "assistant", "content": text}, book, asked_format="minimax_m3")
    assert [json.loads(c.arguments) for c in out.calls] == [{"shipping": {"zip": 18956}, "items": [{"qty": 2}]}]
    assert out.repairs == () and out.content is None


def test_a_cut_invoke_is_not_read() -> None:
    assert calls(f'{NS}<tool_call>\n{NS}<invoke name="create_order">{NS}<user_id>2') == []
