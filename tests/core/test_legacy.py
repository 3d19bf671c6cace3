"""core/legacy.py: the legacy `functions` / `function_call` API as tools on the way in (the history's
function_call and role "function" turns too), and a tool call as a `function_call` on the way out."""

from __future__ import annotations

from typing import Any, cast

from sanctum_proxy.core.legacy import to_function_call, to_tools, uses_functions
from sanctum_proxy.core.openai_chat import Message

WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_functions_are_used_only_without_tools() -> None:
    assert uses_functions({"functions": [WEATHER]})
    assert not uses_functions({"functions": [WEATHER], "tools": [{"type": "function", "function": WEATHER}]})
    assert not uses_functions({"functions": []})


def test_functions_and_a_named_function_call_become_tools_and_tool_choice() -> None:
    body: dict[str, Any] = {"model": "m", "functions": [WEATHER], "function_call": {"name": "get_weather"},
                            "messages": [{"role": "user", "content": "Paris?"}]}
    out = to_tools(body)
    assert out["tools"] == [{"type": "function", "function": WEATHER}]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert out["parallel_tool_calls"] is False
    assert "functions" not in out and "function_call" not in out
    assert out["model"] == "m"
    assert to_tools({**body, "function_call": "none"})["tool_choice"] == "none"


def test_the_history_of_function_turns_becomes_tool_turns() -> None:
    messages = [{"role": "assistant", "content": None,
                 "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"role": "function", "name": "get_weather", "content": "sunny"}]
    call, result = to_tools({"functions": [WEATHER], "messages": messages})["messages"]
    assert call["tool_calls"] == [{"id": "call_legacy_get_weather", "type": "function",
                                   "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert "function_call" not in call
    assert result == {"role": "tool", "tool_call_id": "call_legacy_get_weather", "name": "get_weather",
                      "content": "sunny"}


def test_a_tool_call_answer_goes_back_as_a_function_call() -> None:
    message = cast(Message, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]})
    out, finish = to_function_call(message, "tool_calls")
    assert finish == "function_call"
    assert dict(out) == {"role": "assistant", "content": None,
                         "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    text = cast(Message, {"role": "assistant", "content": "hi"})
    assert to_function_call(text, "stop") == (text, "stop")
