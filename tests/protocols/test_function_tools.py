"""protocols/function_tools.py: a translated request's `tools` as chat function tools, each read by its API's own
reader; what is not a list, or a tool of a type the API's reader cannot serve, is a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import InvalidRequest
from sanctum_proxy.protocols.function_tools import chat_tools, unsupported


def reader(i: int, tool: Any) -> JSONObject:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise unsupported(i, tool, "function tools")
    return {"name": tool["name"], "parameters": tool.get("parameters", {})}


def test_each_tool_is_read_into_a_chat_function_tool() -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
             {"type": "function", "name": "search"}]
    assert chat_tools(tools, reader) == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "search", "parameters": {}}}]
    assert chat_tools(None, reader) == []


def test_tools_that_are_not_a_list_are_a_400_on_tools() -> None:
    with pytest.raises(InvalidRequest) as raised:
        chat_tools({"type": "function"}, reader)
    assert raised.value.param == "tools"


def test_an_unsupported_tool_names_its_index_and_type() -> None:
    with pytest.raises(InvalidRequest) as raised:
        chat_tools([{"type": "function", "name": "f"}, {"type": "web_search_preview"}], reader)
    assert raised.value.param == "tools[1].type"
    assert "web_search_preview" in str(raised.value) and "function tools" in str(raised.value)
