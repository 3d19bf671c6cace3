"""codecs/command_r.py on its own: Command R7B's action list read by `find` (the tool-use completion of Cohere's
guide, docs.cohere.com/docs/command-r7b-hf, verbatim), its thinking block never read for calls, and `render_call`
read back."""

from __future__ import annotations

from sanctum_proxy.codecs import command_r
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"query_daily_sales_report", "query_product_catalog", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in command_r.find(text, NAMES) for c in f.candidates]


def test_an_action_list_of_two_calls_is_read() -> None:
    first = '{"tool_call_id": "0", "tool_name": "query_daily_sales_report", "parameters": {"day": "2023-09-29"}}'
    second = '{"tool_call_id": "1", "tool_name": "query_product_catalog", "parameters": {"category": "Electronics"}}'
    text = f"<|START_ACTION|>[\n    {first},\n    {second}\n]<|END_ACTION|>"
    assert calls(text) == [("query_daily_sales_report", {"day": "2023-09-29"}),
                           ("query_product_catalog", {"category": "Electronics"})]


def test_a_call_written_in_the_thinking_block_is_reasoning() -> None:
    thinking = ('I could send {"tool_name": "query_product_catalog", "parameters": {"category": "Phones"}} '
                "but the user asked about Electronics.")
    text = (f"<|START_THINKING|>{thinking}<|END_THINKING|><|START_ACTION|>[\n    {{\"tool_call_id\": \"0\", "
            '"tool_name": "query_product_catalog", "parameters": {"category": "Electronics"}}\n]<|END_ACTION|>'
            "<|END_OF_TURN_TOKEN|>")
    assert calls(text) == [("query_product_catalog", {"category": "Electronics"})]
    assert [f.reasoning for f in command_r.find(text, NAMES) if f.reasoning] == [thinking]


def test_render_call_is_read_back() -> None:
    assert calls(command_r.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": 3})]


def test_prose_is_no_call() -> None:
    assert command_r.find("I would use query_product_catalog for that.", NAMES) == []
