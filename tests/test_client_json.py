"""A client that set `response_format` (json_object / json_schema) gets its JSON as content: call-shaped JSON
is its answer, never read for a call, streamed (live, not held as call markup) and not."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.streaming import Assembler
from sanctum_proxy.repair.toolbox import Toolbox
from tests.fakes.upstream import Step, completion, content_chunks, native_call
from tests.stream_rules import read_stream

SEARCH = {"type": "function", "function": {
    "name": "search_web", "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                         "required": ["query"]}}}
ANSWER = '{"name": "search_web", "arguments": {"query": "call-shaped, but the answer the client asked for"}}'
FORMATS: dict[str, dict[str, Any]] = {
    "json_object": {"type": "json_object"},
    "json_schema": {"type": "json_schema", "json_schema": {"name": "pick", "schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}}}},
}


def ask(fmt: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "Pick a tool, as JSON."}], "tools": [SEARCH],
            "response_format": FORMATS[fmt], **extra}


def test_assess_leaves_content_alone_when_told_and_reads_native_calls():
    book = Toolbox.from_tools([SEARCH])
    got = assess({"role": "assistant", "content": ANSWER}, book, client_json=True)
    assert got.calls == () and got.problems == () and got.content == ANSWER
    native = {"role": "assistant", "content": ANSWER, "tool_calls": [native_call("search_web", '{"query": "q"}')]}
    assert [c.arguments for c in assess(native, book, client_json=True).calls] == ['{"query": "q"}']


def test_call_markup_beside_a_client_schema_is_still_a_call():
    """An agent SDK with a structured output sends response_format beside its tools (openai-agents
    `output_type`): a `<tool_call>` the model writes in content is a call, not the JSON answer."""
    book = Toolbox.from_tools([SEARCH])
    text = "<tool_call>{'name': 'search_web', 'arguments': {'query': 'q',}}</tool_call>"
    got = assess({"role": "assistant", "content": text}, book, client_json=True)
    assert [c.name for c in got.calls] == ["search_web"] and not got.content
    a = Assembler(client_json=True)
    shown = [a.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in (text[:5], text[5:])]
    assert "".join(shown) == ""  # held as call markup, as without response_format


def test_the_assembler_holds_nothing_of_a_json_answer():
    a = Assembler(client_json=True)
    shown = [a.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in (ANSWER[:3], ANSWER[3:])]
    assert shown == [ANSWER[:3], ANSWER[3:]]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_call_shaped_json_answer_stays_content(client, fake, fmt):
    fake[0].push(Step(body=completion(ANSWER)))
    r = client.post("/v1/chat/completions", json=ask(fmt))
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == ANSWER and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop" and len(fake[0].requests) == 1
    assert fake[0].requests[0]["response_format"] == FORMATS[fmt]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_call_shaped_json_answer_stays_content_streamed(proxy, fake, fmt):
    fake[0].push(Step(chunks=content_chunks(ANSWER, size=7)))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=ask(fmt, stream=True), timeout=20) as r:
        got = read_stream(r.read())
    assert got.content == ANSWER and got.calls == [] and got.finish_reason == "stop"
    live = [c["choices"][0]["delta"].get("content") for c in got.chunks if c["choices"]]
    assert ANSWER[:7] in live, "the JSON answer was held back as call markup"
    assert orjson.loads(got.content)["name"] == "search_web"
