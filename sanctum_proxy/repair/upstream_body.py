"""The body a round sends upstream: the request in its mode, its constraint, and the hidden turns after it."""

from __future__ import annotations

import orjson

from sanctum_proxy.core.shapes import ChatMessage, JSONObject
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.constraint import Constraint
from sanctum_proxy.repair.loop_data import Mode, Plan


def upstream_body(plan: Plan, mode: Mode, extra: list[ChatMessage],
                  constraint: Constraint | None = None, *, tools: bool = True) -> JSONObject:
    body = plan.body
    if not tools:  # the conversation alone, for a text answer
        body = prompted.to_prompted(body, None, plan.prompt_format)
    elif constraint is not None and constraint.json_prompt:
        listed, text, parallel = constraint.prompt or (constraint.book, constraint.text, constraint.parallel)
        section = cn.format_section(listed, text=text, parallel=parallel, hints=plan.required is not None)
        body = prompted.to_prompted(body, listed, "constrained", call_format=section)
        body["response_format"] = cn.response_format(constraint.schema())
    elif constraint is not None and constraint.how == "tool_choice":
        body = native_body(body)
        body["tool_choice"] = "required"  # a named choice is narrowed to its one tool already
    elif plan.book is not None and (mode == "prompted" or constraint is not None and constraint.prompted):
        body = prompted.to_prompted(body, plan.book, plan.prompt_format, parallel=plan.parallel,
                                    required=plan.required)
        if constraint is not None and constraint.grammar is not None:
            body["grammar"] = constraint.grammar
        elif constraint is not None:
            body["response_format"] = cn.response_format(constraint.schema())
    elif plan.book is None and mode == "prompted":
        body = prompted.to_prompted(body, None, plan.prompt_format)
    else:
        body = native_body(body)
    if extra:
        messages = body.get("messages")  # protocols/chat_request.py checked it is a list
        body = {**body, "messages": [*(messages if isinstance(messages, list) else ()), *extra]}
    return body


def native_body(body: JSONObject) -> JSONObject:
    """llama.cpp's quirks: a named tool_choice as that tool alone and "required"; history calls completed."""
    out = dict(body)
    choice, tools, messages = body.get("tool_choice"), body.get("tools"), body.get("messages")
    if isinstance(choice, dict) and isinstance(tools, list):
        name = (choice.get("function") or {}).get("name")
        out["tools"] = [t for t in tools if (t.get("function") or {}).get("name") == name]
        out["tool_choice"] = "required"
    out["messages"] = [_normalised(m) for m in messages] if isinstance(messages, list) else []
    return out


def _normalised(message: JSONObject) -> JSONObject:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return message
    fixed = []
    for call in calls:
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        function["arguments"] = arguments if isinstance(arguments, str) and arguments else (
            "{}" if arguments in (None, "") else orjson.dumps(arguments).decode())
        fixed.append({**call, "type": call.get("type") or "function", "function": function})
    return {**message, "tool_calls": fixed}
