"""One tool call inside the proxy (core/calls.ToolCall) and one on the chat wire (core/shapes.ToolCallWire), with
the two converters: to_openai and from_wire."""

from __future__ import annotations

from sanctum_proxy.core.calls import ToolCall
from sanctum_proxy.core.shapes import ToolCallWire


def test_a_wire_call_round_trips() -> None:
    inside = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
    wire: ToolCallWire = inside.to_openai()
    assert wire == {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert ToolCall.from_wire(wire, 0) == inside


def test_a_loose_wire_call_gets_an_id_a_name_and_json_text() -> None:
    assert ToolCall.from_wire({"function": {"name": "f", "arguments": {"a": 1}}}, 2) == ToolCall("call_2", "f",
                                                                                                 '{"a":1}')
    assert ToolCall.from_wire({"id": "x", "function": "not an object"}, 0) == ToolCall("x", "", "{}")
    assert ToolCall.from_wire({"id": "y", "function": {"name": "g", "arguments": ""}}, 0) == ToolCall("y", "g", "{}")
