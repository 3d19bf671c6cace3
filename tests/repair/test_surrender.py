"""repair/surrender.py: with on_surrender "last_call", the last round's call to a known tool, as the model made it,
is the answer after the last repair round (pure: Plans with round records, no loop run)."""

from __future__ import annotations

from typing import Any

import pytest

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.repair.loop_data import Plan, RoundRecord
from sanctum_proxy.repair.surrender import known_calls, last_call
from sanctum_proxy.repair.toolbox import Toolbox

SCHEMA = {"type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
          "required": ["file_path", "content"]}
TOOLS = [{"type": "function", "function": {"name": "Write", "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "Read", "parameters": SCHEMA}}]
ERROR = ToolCallParseError("spell call could not be repaired: no valid spell call after 2 repair round(s)",
                           rounds=3, rejected=["a", "b", "c"])


def native(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def plan_after(*answers: dict[str, Any] | None, parallel: bool = True) -> tuple[Plan, list[RoundRecord]]:
    body: dict[str, Any] = {"model": "m", "messages": [], "tools": TOOLS}
    if not parallel:
        body["parallel_tool_calls"] = False
    plan = Plan(body=body, book=Toolbox.from_tools(TOOLS), mode="native", auto=False, max_rounds=2,
                on_surrender="last_call")
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    return plan, [RoundRecord(i, "native", {}, 1.0, answer=answer, finish_reason="tool_calls", usage=usage)
                  for i, answer in enumerate(answers, 1)]


def test_the_last_rounds_call_goes_back_as_the_model_made_it_with_the_surrender_omen():
    first = {"role": "assistant", "content": None, "tool_calls": [native("Write", '{"content": "x"}', "c0")]}
    last = {"role": "assistant", "content": None, "tool_calls": [native("Write", '{"content":  "hi"}', "c2")]}
    final = last_call(*plan_after(first, first, last), ERROR, [])
    assert final is not None and final.outcome == "surrendered" and final.finish_reason == "tool_calls"
    assert final.message["tool_calls"] == [native("Write", '{"content":  "hi"}', "c2")]  # byte for byte
    assert final.rounds == 3 and final.usage is not None and final.usage["completion_tokens"] == 6
    assert [o.type for o in final.omens] == [om.OmenType.SURRENDERED]
    assert final.omens[0].round == 3 and final.omens[0].fields["rejected"] == ["a", "b", "c"]


def test_a_call_written_in_text_with_broken_json_is_mended_and_unknown_tools_are_left_out():
    text = ("I will write it. <tool_call>{'name': 'Write', 'arguments': {'content': 'hi',}}</tool_call>"
            '<tool_call>{"name": "Delete", "arguments": {}}</tool_call>')
    calls = known_calls({"role": "assistant", "content": text}, Toolbox.from_tools(TOOLS))
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [("Write", '{"content":"hi"}')]


@pytest.mark.parametrize("answer", [
    {"role": "assistant", "content": None, "tool_calls": [native("Delete", "{}")]},  # no such tool
    {"role": "assistant", "content": None, "tool_calls": [native("Write", "[1, 2]")]},  # arguments no object
    {"role": "assistant", "content": None, "tool_calls": [native("Write", "{{{{")]},  # past mending
    {"role": "assistant", "content": "I cannot do that."},  # no call at all
    None,  # the last round failed (an upstream error)
])
def test_without_a_known_call_the_error_stands(answer):
    assert last_call(*plan_after(answer), ERROR, []) is None


def test_parallel_tool_calls_false_keeps_the_first_call():
    answer = {"role": "assistant", "content": None,
              "tool_calls": [native("Write", '{"content": "1"}', "a"), native("Read", "{}", "b")]}
    final = last_call(*plan_after(answer, parallel=False), ERROR, [])
    assert final is not None and [c["id"] for c in final.message["tool_calls"]] == ["a"]
    final = last_call(*plan_after(answer), ERROR, [])
    assert final is not None and [c["id"] for c in final.message["tool_calls"]] == ["a", "b"]
