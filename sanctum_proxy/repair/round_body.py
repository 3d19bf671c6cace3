"""What a round sends upstream: the request in its mode and constraint, then hidden turns (corrections, follow-ups)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sanctum_proxy.codecs import families
from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Problem, Tool, ToolCall, content_text
from sanctum_proxy.core.shapes import ChatMessage, JSONObject, JSONValue, ToolCallWire
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.constrain import Constraint
from sanctum_proxy.repair.grounding import Evidence, key, leaves, loads, traced, users
from sanctum_proxy.repair.loop_data import Answer, Mode, Plan
from sanctum_proxy.repair.mend import assess, native_call_text
from sanctum_proxy.repair.toolbox import Toolbox


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
    """The same object where nothing changes: the trace then holds it once."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list) or all(map(_normal, calls)):
        return message
    fixed = []
    for call in calls:
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        function["arguments"] = arguments if isinstance(arguments, str) and arguments else (
            "{}" if arguments in (None, "") else orjson.dumps(arguments).decode())
        fixed.append({**call, "type": call.get("type") or "function", "function": function})
    return {**message, "tool_calls": fixed}


def _normal(call: JSONValue) -> bool:
    if not isinstance(call, dict) or not call.get("type"):
        return False
    function = call.get("function")
    return isinstance(function, dict) and isinstance(function.get("arguments"), str) and bool(function["arguments"])


_CLOSING = "Answer again with only the corrected tool call, and nothing else."


# A string that ends too soon most often holds unescaped quotes or line breaks.
ESCAPE_HINT = 'Inside a JSON string, write a quote as \\" and a line break as \\n.'


CONSTRAINED_INSTEAD = ("(not sent to the model: the next round was constrained to a valid call by a grammar, "
                       "without the rejected answer and this correction: correction_context = \"fresh\")")
ASKS_TEXT = frozenset({"repeated_call", "calls_not_allowed"})  # reasons answered by text, not by a call
ANSWERED_IN_TEXT = "(not sent to the model: the request was asked again without tools, for a text answer)"


def pinned(problems: Sequence[Problem], book: Toolbox) -> str | None:
    """The one known tool every problem is about, else None."""
    tools = {p.tool for p in problems}
    first = problems[0] if problems else None
    if first is None or len(tools) != 1 or first.tool not in book.tools or first.reason == "unknown_spell":
        return None
    return first.tool


def correction(problems: Sequence[Problem], book: Toolbox, kept: Sequence[str] = ()) -> str:
    """The correction of `problems`; `kept` names the valid calls that stay."""
    lines: list[str] = []
    if kept:
        calls = ", ".join(dict.fromkeys(kept))
        lines.append(f"Your valid calls ({calls}) are kept; do not repeat them. Correct only the call(s) below.")
    for problem in problems:
        lines.extend(_lines(problem, book))
    if any(p.reason not in ASKS_TEXT for p in problems):
        lines.append(_CLOSING)
    return "\n".join(dict.fromkeys(lines))


def _lines(problem: Problem, book: Toolbox) -> list[str]:
    if problem.reason == "unknown_spell":
        return [
            f"There is no tool named {problem.tool!r}. The available tools are:",
            *_all_signatures(book),
        ]
    if problem.reason == "missing_call":
        if problem.tool:
            return [f"A call to the tool {problem.tool!r} is required.", *_tool_lines(problem.tool, book)]
        return ["A tool call is required. The available tools are:", *_all_signatures(book)]
    if problem.reason == "malformed_json":
        why = "; ".join(problem.details)
        head = f"The arguments of your call to {problem.tool!r}" if problem.tool else "Your tool call"
        return [
            f"{head} were not valid JSON: {why}. Write the arguments as one complete JSON object.",
            *([ESCAPE_HINT] if "string value is cut off" in why or "not escaped" in why else []),
            *_tool_lines(problem.tool, book),
        ]
    if problem.reason == "repeated_call":
        return list(problem.details)
    if problem.reason == "calls_not_allowed":
        return [*problem.details, "Answer in text, without calling a tool."]
    if problem.reason == "ungrounded_arguments":
        return [
            "Your tool call uses values that appear nowhere in the conversation:",
            *(f"- {d}" for d in problem.details),
            'Call a tool only with values the user gave; when no tool fits, answer in text.',
        ]
    head = {
        "missing_arguments": "is missing required arguments",
        "unexpected_arguments": "has arguments the tool does not take",
        "invalid_arguments": "has invalid arguments",
    }[problem.reason]
    return [
        f"Your call to {problem.tool!r} {head}:",
        *(f"- {d}" for d in problem.details),
        *_tool_lines(problem.tool, book),
    ]


def _all_signatures(book: Toolbox) -> list[str]:
    return [signature(s) for s in book.tools.values()]


def _tool_lines(name: str | None, book: Toolbox) -> list[str]:
    tool = book.tools.get(name) if name else None
    if tool is None:
        return []
    return [f"The tool's parameters: {signature(tool)}", f"Its schema: {_compact(tool.parameters)}"]


def signature(tool: Tool) -> str:
    """`name(param: type, other?: type)`; `?` marks an optional parameter."""
    props = tool.parameters.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = tool.parameters.get("required")
    req = set(required) if isinstance(required, list) else set()
    params = ", ".join(
        f"{k}{'' if k in req else '?'}: {_type(v)}" for k, v in props.items() if isinstance(k, str)
    )
    line = f"{tool.name}({params})"
    return f"{line} - {tool.description}" if tool.description else line


def _type(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"][:20])
    t = schema.get("type")
    if isinstance(t, list):
        return " | ".join(str(x) for x in t)
    if t == "array" and isinstance(schema.get("items"), Mapping):
        return f"array of {_type(schema['items'])}"
    return str(t) if isinstance(t, str) else "any"


def _compact(schema: Mapping[str, object]) -> str:
    try:
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return "{}"
    return text if len(text) <= 4000 else text[:3997] + "..."


def rejected_answer_text(message: ChatMessage, fmt: str = families.FALLBACK) -> str:
    """The answer quoted back: content, then native calls in format `fmt`, arguments verbatim."""
    msg = message if isinstance(message, Mapping) else {}
    fmt = fmt if fmt in families.FORMAT_NAMES else families.FALLBACK
    parts = [content_text(msg.get("content"))]
    calls = msg.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            name = fn.get("name")
            parts.append(families.render_call(fmt, name if isinstance(name, str) else "", _arguments(fn)))
    return "\n".join(p for p in parts if p)


def sent_answer_text(message: ChatMessage) -> str:
    """The answer as sent, less server ids, so a verbatim repeat gives the same text."""
    msg = message if isinstance(message, Mapping) else {}
    calls = msg.get("tool_calls")
    raws = [native_call_text({k: v for k, v in call.items() if k not in _SERVER_KEYS} if isinstance(call, Mapping)
                              else call) for call in (calls if isinstance(calls, list) else [])]
    return "\n".join(p for p in (content_text(msg.get("content")), *raws) if p)


_SERVER_KEYS = ("id", "index")


def _arguments(fn: Mapping[str, object]) -> Any:
    """Text or a mapping as it is, anything else as JSON."""
    args = fn.get("arguments")
    if isinstance(args, str | Mapping) or args is None:
        return args
    try:
        return json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(args)


NEXT_CALL = "Now make the next call the request asks for: other arguments, or another tool."


def follows_up(plan: Plan, constraint: Constraint | None, free_choice: bool, calls: int, number: int) -> bool:
    """Whether to ask for another call after this round."""
    return (plan.follow_up_calls and free_choice and constraint is not None and constraint.answer_object
            and plan.parallel and calls == 1 and number <= plan.max_rounds)


def next_call_turns(call: ToolCall) -> tuple[ChatMessage, ChatMessage]:
    """The call as an answer object, then the request for the next one."""
    written = orjson.dumps({"name": call.name, "arguments": loads(call.arguments)}).decode()
    return {"role": "assistant", "content": written}, {"role": "user", "content": NEXT_CALL}


def next_call(plan: Plan, answer: Answer, number: int) -> tuple[ToolCall | None, tuple[om.Omen, ...]]:
    """A MORE round's one valid call, or None, with its repair omens."""
    assert plan.book is not None
    assessment = assess(answer.message, plan.book, finish_reason=answer.finish_reason, parallel_tool_calls=False,
                        max_repair_chars=plan.max_repair_bytes, asked_format=None, client_json=False,
                        **plan.new_ids)
    broken = cn.broken_call(answer.message, answer.finish_reason)
    if not assessment.calls or assessment.problems or broken:
        return None, ()
    return assessment.calls[0], tuple(om.repaired(number, r) for r in assessment.repairs)


def novel(plan: Plan, call: ToolCall, held: Sequence[ToolCallWire]) -> bool:
    """Whether the call adds a value from the user's turns that no held call has."""
    arguments = loads(call.arguments)
    if not isinstance(arguments, dict):
        return False
    evidence = Evidence.of(users(plan.body.get("messages")))
    used = {key(v) for c in held for v in leaves(loads((c.get("function") or {}).get("arguments") or "null"))}
    return any(key(v) not in used and traced(v, evidence) for v in leaves(arguments))
