"""The legacy `functions` / `function_call` API, mapped onto tools on the way in and back on the way out."""

from __future__ import annotations

from typing import cast

from sanctum_proxy.core.openai_chat import Message, function_tool, tool_call
from sanctum_proxy.core.shapes import JSONObject


def uses_functions(body: JSONObject) -> bool:
    return bool(body.get("functions")) and not body.get("tools")


def to_tools(body: JSONObject) -> JSONObject:
    out = {k: v for k, v in body.items() if k not in ("functions", "function_call")}
    functions, messages = body.get("functions", []), body.get("messages", [])  # chat_request checked they are lists
    out["tools"] = [function_tool(f) for f in functions] if isinstance(functions, list) else []
    choice = body.get("function_call")
    if isinstance(choice, dict) and choice.get("name"):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice in ("none", "auto"):
        out["tool_choice"] = choice
    out["parallel_tool_calls"] = False
    out["messages"] = [_message_to_tools(m) for m in messages] if isinstance(messages, list) else []
    return out


def _message_to_tools(message: JSONObject) -> JSONObject:
    call = message.get("function_call")
    if message.get("role") == "assistant" and isinstance(call, dict):
        rest = {k: v for k, v in message.items() if k != "function_call"}
        return {**rest, "tool_calls": [
            tool_call(f"call_legacy_{call.get('name', '')}", call.get("name", ""), call.get("arguments", "{}"))]}
    if message.get("role") == "function":
        return {"role": "tool", "tool_call_id": f"call_legacy_{message.get('name', '')}",
                "name": message.get("name", ""), "content": message.get("content") or ""}
    return message


def to_function_call(message: Message, finish_reason: str) -> tuple[Message, str]:
    calls = message.get("tool_calls")
    if not calls:
        return message, finish_reason
    rest = {k: v for k, v in message.items() if k != "tool_calls"}
    return cast(Message, {**rest, "function_call": dict(calls[0]["function"])}), "function_call"
