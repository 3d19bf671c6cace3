"""A translated request's `tools` as chat function tools, each read by its API's own reader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sanctum_proxy.core.openai_chat import FunctionTool, function_tool
from sanctum_proxy.core.shapes import JSONObject, JSONValue
from sanctum_proxy.errors import InvalidRequest, shown


def chat_tools(tools: JSONValue, function_of: Callable[[int, Any], JSONObject]) -> list[FunctionTool]:
    """`function_of(i, tool)` is tools[i]'s chat `function`, raising `unsupported` for one it cannot serve."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    return [function_tool(function_of(i, tool)) for i, tool in enumerate(tools)]


def unsupported(i: int, tool: JSONValue, served: str) -> InvalidRequest:
    kind = tool.get("type") if isinstance(tool, dict) else None
    return InvalidRequest(f"tools[{i}]: tools of type {shown(kind)} are not supported: sanctum-proxy serves {served}",
                          param=f"tools[{i}].type")
