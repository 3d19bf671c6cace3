"""The legacy `functions` / `function_call` API, mapped onto tools on the way in and back on the way out."""

from __future__ import annotations

from typing import Any, cast

from sanctum_proxy.core.openai_chat import Message, function_tool, tool_call


def uses_functions(body: dict[str, Any]) -> bool:
    return bool(body.get("functions")) and not body.get("tools")


def to_tools(body: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in ("functions", "function_call")}
    out["tools"] = [function_tool(f) for f in body.get("functions", [])]
    choice = body.get("function_call")
    if isinstance(choice, dict) and choice.get("name"):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice in ("none", "auto"):
        out["tool_choice"] = choice
    out["parallel_tool_calls"] = False
    out["messages"] = [_message_to_tools(m) for m in body.get("messages", [])]
    return out


def _message_to_tools(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("role") == "assistant" and isinstance(message.get("function_call"), dict):
        call = message["function_call"]
        rest = {k: v for k, v in message.items() if k != "function_call"}
        return {**rest, "tool_calls": [
            tool_call(f"call_legacy_{call.get('name', '')}", call.get("name", ""), call.get("arguments", "{}"))]}
    if message.get("role") == "function":
        return {"role": "tool", "tool_call_id": f"call_legacy_{message.get('name', '')}",
                "name": message.get("name", ""), "content": message.get("content") or ""}
    return message


def to_function_call(message: Message, finish_reason: str) -> tuple[Message, str]:
    """A tool-calls message as a legacy function_call message."""
    calls = message.get("tool_calls")
    if not calls:
        return message, finish_reason
    rest = {k: v for k, v in message.items() if k != "tool_calls"}
    return cast(Message, {**rest, "function_call": dict(calls[0]["function"])}), "function_call"
