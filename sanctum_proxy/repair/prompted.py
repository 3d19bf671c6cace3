"""Prompted tool calling: tools, history calls and results written as text in one call format's shapes."""

from __future__ import annotations

from typing import Any, cast

import orjson

from sanctum_proxy.codecs import families
from sanctum_proxy.codecs.base import RESULT_TAGS
from sanctum_proxy.codecs.registry import format_of, render_call
from sanctum_proxy.core.calls import content_text, example_text
from sanctum_proxy.core.shapes import ChatMessage, JSONValue
from sanctum_proxy.repair.toolbox import Toolbox

_RESULTS = "After a tool runs, its result comes back to you inside <tool_response></tool_response> tags."
_RESULTS_OWN = "After a tool runs, its result comes back to you in the next message."
STRIPPED = ("tools", "tool_choice", "functions", "function_call", "parallel_tool_calls")

_OWN_FORMAT = "To call a tool, write the call in exactly this format, for example:\n%s"


def _how_to_call(fmt: str, name: str, parameters: JSONValue, hints: bool) -> str:
    own = format_of(fmt)
    if own.instructions:
        return own.instructions % (name, example_text(parameters, hints=hints))
    return _OWN_FORMAT % example_text(parameters, lambda example: own.render_call(name, example), hints=hints)


# What a model reading a schema in its prompt needs not see: metadata, and the defaults of JSON Schema itself
_NOISE = frozenset({"$schema", "$id", "$comment", "title", "examples", "readOnly", "writeOnly", "deprecated"})
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def compact_schema(schema: JSONValue) -> JSONValue:
    """A tool's schema as the prompt shows it: without metadata, defaults, or what a model cannot act on."""
    if isinstance(schema, list):  # `items` as a list (draft 4 tuples)
        return [compact_schema(each) for each in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, JSONValue] = {}
    for key, value in schema.items():
        if key in _NOISE or (key == "additionalProperties" and isinstance(value, bool)) or \
                (key == "default" and value is None):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            value = {name: compact_schema(each) for name, each in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list) or key in _SCHEMA_ONE:
            value = compact_schema(value)
        out[key] = value
    return out


def _schema_text(parameters: JSONValue) -> str:
    """The arguments' schema as compact JSON, without the `type` every arguments object has."""
    shown = compact_schema(parameters or {})
    if isinstance(shown, dict) and shown.get("type") == "object":
        shown = {k: v for k, v in shown.items() if k != "type"}
        if shown == {"properties": {}}:
            shown = {}
    return orjson.dumps(shown).decode()


def system_section(book: Toolbox, fmt: str, *, parallel: bool = True, required: str | None = None,
                   call_format: str | None = None) -> str:
    """The text that offers the tools; `call_format` replaces the how-to-call paragraph."""
    lines = ["# Tools", "", "You can call these tools. Each is given with a JSON Schema of its arguments:", ""]
    for tool in book.tools.values():
        lines.append(f"- {tool.name}: {(tool.description or '').strip() or '(no description)'}\n"
                     f"  arguments: {_schema_text(tool.parameters)}")
    if call_format is not None:
        return "\n".join([*lines, "", call_format.rstrip(), _RESULTS])
    first = next(iter(book.tools.values()))
    lines += ["", _how_to_call(fmt, first.name, first.parameters, hints=required is not None)]
    lines.append("You may call several tools, one block each." if parallel else "Call at most one tool per answer.")
    if required == "any":
        lines.append("You must answer with a tool call.")
    elif required:
        lines.append(f"You must answer with a call to {required}.")
    else:
        lines.append("If no tool is needed, answer in plain text without any tool call block.")
    lines.append(_RESULTS if families.render_result(fmt, "", "", "").startswith("<tool_response") else _RESULTS_OWN)
    return "\n".join(lines)


def to_prompted(body: dict[str, Any], book: Toolbox | None, fmt: str, *, parallel: bool = True,
                required: str | None = None, call_format: str | None = None) -> dict[str, Any]:
    """The upstream body for a prompted round. `book` None (tool_choice none) offers no tools."""
    out = {k: v for k, v in body.items() if k not in STRIPPED}
    messages = rewrite_history(body.get("messages", []), fmt)
    if book is not None and book.tools:
        messages = merge_system(messages, system_section(book, fmt, parallel=parallel, required=required,
                                                         call_format=call_format))
    out["messages"] = messages
    return out


def merge_system(messages: list[ChatMessage], section: str) -> list[ChatMessage]:
    """The section goes after the client's own system text, in one system message at the front."""
    if messages and messages[0].get("role") in ("system", "developer"):
        own = content_text(messages[0].get("content"))
        return [{"role": "system", "content": f"{own}\n\n{section}" if own else section}, *messages[1:]]
    return [{"role": "system", "content": section}, *messages]


def rewrite_history(messages: list[ChatMessage], fmt: str) -> list[ChatMessage]:
    names: dict[str, str] = {}
    out: list[tuple[ChatMessage, bool]] = []  # (message, is a tool result)
    for message in messages:
        role = message.get("role")
        if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
            out.append((_assistant_as_text(message, fmt, names), False))
        elif role in ("tool", "function"):
            out.append((_result_as_text(message, fmt, names), True))
        else:
            kept = {k: v for k, v in message.items() if k not in ("tool_calls", "tool_call_id")}
            out.append((cast(ChatMessage, kept), False))
    return _merge_adjacent_results(out)


def _assistant_as_text(message: ChatMessage, fmt: str, names: dict[str, str]) -> ChatMessage:
    parts = [content_text(message.get("content"))] if message.get("content") else []
    calls = list(message.get("tool_calls") or [])
    if message.get("function_call"):
        calls.append({"id": "", "function": message["function_call"]})
    for call in calls:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        name = str(function.get("name", ""))
        if isinstance(call, dict) and call.get("id"):
            names[str(call["id"])] = name
        parts.append(render_call(fmt, name, function.get("arguments")))
    return {"role": "assistant", "content": "\n".join(p for p in parts if p)}


def _result_as_text(message: ChatMessage, fmt: str, names: dict[str, str]) -> ChatMessage:
    call_id = str(message.get("tool_call_id") or "")
    name = str(message.get("name") or names.get(call_id, ""))
    return {"role": "user", "content": families.render_result(fmt, name, call_id, content_text(message.get("content")))}


def _merge_adjacent_results(messages: list[tuple[ChatMessage, bool]]) -> list[ChatMessage]:
    """Several tool results in a row become one user turn (templates want roles to alternate)."""
    out: list[ChatMessage] = []
    previous = False
    for message, result in messages:
        if result and previous:
            joined = cast(str, out[-1]["content"]) + "\n" + cast(str, message["content"])
            out[-1] = {"role": "user", "content": joined}
        else:
            out.append(message)
        previous = result
    return out


def without_result_tags(text: str | None) -> str | None:
    """An answer's text without the tool-result tags a small model echoes; the text inside stays."""
    if not text or "tool_response" not in text:
        return text
    out, tags = RESULT_TAGS.subn("", text)
    return (out.strip() or None) if tags else text
