"""Which requests are read on the event loop: a tool list is checked off it the first time, on it after."""

from __future__ import annotations

import orjson

from sanctum_proxy.core.offload import known_tools, read_tools, tools_key
from sanctum_proxy.repair.toolbox import Toolbox

TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 400, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}} for i in range(12)]


def body(tools: list[dict[str, object]]) -> tuple[bytes, dict[str, object]]:
    data = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    return orjson.dumps(data), data


def test_a_new_tool_list_is_read_off_the_loop_and_a_known_one_on_it():
    raw, data = body(TOOLS)
    key = tools_key(raw, data, "chat")
    assert key and not known_tools(key)  # never read: its schemas' checks may take milliseconds
    assert tools_key(raw, data, "chat") == key and not known_tools(key)  # not kept until its checks passed
    read_tools(key)
    assert known_tools(tools_key(raw, data, "chat"))
    changed = [*TOOLS[:-1], {**TOOLS[-1], "function": {**TOOLS[-1]["function"], "name": "other"}}]
    assert not known_tools(tools_key(*body(changed), "chat"))


def test_a_small_body_without_patterns_is_read_on_the_loop():
    raw, data = body(TOOLS[:1])
    assert len(raw) < 4096 and tools_key(raw, data, "chat") is None


def test_a_pattern_in_a_small_body_is_read_off_the_loop_the_first_time():
    tool = {"type": "function", "function": {"name": "t", "parameters": {
        "type": "object", "properties": {"p": {"type": "string", "pattern": "^a+$"}}}}}
    raw, data = body([tool])
    assert tools_key(raw, data, "chat") and not known_tools(tools_key(raw, data, "chat"))


def test_a_tool_is_judged_on_the_loop_only_once_its_check_was_quick():
    book = Toolbox.from_tools(TOOLS)
    assert not book.quick("tool_0")  # never checked: its validator is compiled on the first check
    assert book.check("tool_0", {"path": "a"}) == []  # compiled: that first check may be slow
    for _ in range(5):  # a busy machine may stall one check
        assert book.check("tool_0", {"path": "b"}) == []
        if book.quick("tool_0"):
            break
    assert book.quick("tool_0") and not book.quick("tool_1") and not book.quick(None)
