"""repair/history.mended on its own: replayed calls whose arguments an upstream cannot parse, each case from the
public thread that reported it; the same request through the proxy is tests/routes/test_replayed_history.py."""

from __future__ import annotations

from typing import Any

import pytest

from sanctum_proxy.repair import history


def call(arguments: Any, call_id: str = "c1", name: str = "f") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def body(*calls: dict[str, Any], results: int = 1) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."},
                                      {"role": "assistant", "content": None, "tool_calls": list(calls)}]
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"result {c['id']}"} for c in calls[:results]]
    return {"model": "m", "messages": [*messages, {"role": "user", "content": "Continue."}]}


MENDED = [
    # vllm-project/vllm#43995: unescaped quotes inside a value ("Expecting ',' delimiter").
    ('{"filePath": "/tmp/test.txt", "newString": "He said "hello" and left", "oldString": "old content"}',
     '{"filePath":"/tmp/test.txt","newString":"He said \\"hello\\" and left","oldString":"old content"}'),
    # noonghunna/club-3090#665: a call cut before its closing brace (llama-server: "Failed to parse tool call
    # arguments as JSON").
    ('{"service":"checkout","window":"24h"', '{"service":"checkout","window":"24h"}'),
]
UNREADABLE = [
    '{"contents": "# Notes\\n\\nFirst line of the',  # vllm-project/vllm#47761: cut at max_tokens inside a string
    '{"value": ',  # local-inference-lab/vllm#684: a Codex function_call replayed through /v1/responses
    "ls -la /tmp",  # not JSON at all
    "[1, 2",  # mends to a list, which is no arguments object
]


@pytest.mark.parametrize(("sent", "mended"), MENDED)
def test_arguments_the_lenient_reader_reads_are_mended_in_place(sent, mended):
    asked = body(call(sent))
    out, omens = history.mended(asked, "hermes")
    assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == mended
    assert [out["messages"][i] is asked["messages"][i] for i in (0, 2, 3)] == [True, True, True]
    assert [(o.round, o.fields["message"], o.fields["as_text"], o.fields["raw"]) for o in omens] == [
        (0, 1, False, sent)]


@pytest.mark.parametrize("sent", UNREADABLE)
def test_arguments_that_cannot_be_read_send_the_call_and_its_result_as_text(sent):
    out, omens = history.mended(body(call(sent)), "hermes")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user", "user"]
    assert "tool_calls" not in out["messages"][1] and "<tool_call>" in out["messages"][1]["content"]
    assert "result c1" in out["messages"][2]["content"]
    assert [(o.fields["spell"], o.fields["call_id"], o.fields["as_text"]) for o in omens] == [("f", "c1", True)]


def test_one_unreadable_call_sends_its_whole_message_and_all_its_results_as_text():
    out, omens = history.mended(body(call("{}", "c1"), call('{"a": ', "c2"), results=2), "hermes")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user", "user"]
    assert "result c1" in out["messages"][2]["content"] and "result c2" in out["messages"][2]["content"]
    assert [o.fields["call_id"] for o in omens] == ["c2"]


@pytest.mark.parametrize("arguments", ['{"a": 1}', '{"a":  [1, 2]}', "", None, {"a": 1}, "[]", "null"])
def test_arguments_an_upstream_reads_leave_the_body_as_it_came(arguments):
    asked = body(call(arguments))
    assert history.mended(asked, "hermes") == (asked, ())
    assert history.mended(asked, "hermes")[0] is asked
