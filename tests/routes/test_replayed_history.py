"""A call the client replays with arguments that are not JSON (an agent echoing a truncated call back) never
reaches the upstream as such: vLLM answers that history with a 400 on every later turn (vllm-project/vllm#47761,
#43995), llama-server with a 500 (OpenHands/software-agent-sdk#2887). The proxy mends the arguments, or, where
they cannot be read, sends the call and its results as text; every other message goes as the client sent it,
and a SpellHistoryMended omen says what changed. Through the proxy, streamed and not, on chat completions and
Responses (Messages' tool_use input and Ollama's arguments are objects: nothing to mend)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.fakes.upstream import Step, completion, content_chunks, vllm_history_error
from tests.stream_rules import read_stream
from tests.tools import CITY, WEATHER

# vllm#43995: a string value with unescaped quotes ("Expecting ',' delimiter"), mended by the lenient reader.
QUOTES = '{"filePath": "/tmp/test.txt", "newString": "He said "hello" and left", "oldString": "old content"}'
MENDED = '{"filePath":"/tmp/test.txt","newString":"He said \\"hello\\" and left","oldString":"old content"}'
# vllm#47761: generation cut at max_tokens inside a string ("Unterminated string starting at"): no value to
# read without inventing its end.
CUT = '{"contents": "# Notes\\n\\nFirst line of the'
EDIT = {"type": "function", "function": {"name": "edit_file", "parameters": {"type": "object", "properties": {
    "filePath": {"type": "string"}, "newString": {"type": "string"}, "oldString": {"type": "string"},
    "contents": {"type": "string"}}}}}


def history(arguments: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You edit files."},
        {"role": "user", "content": "Fix the greeting in /tmp/test.txt."},
        {"role": "assistant", "content": "Editing.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "edit_file", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: the tool was called with invalid arguments."},
        {"role": "user", "content": "Try again."}]


def ask(arguments: str, stream: bool) -> dict[str, Any]:
    return {"model": "m", "messages": history(arguments), "tools": [EDIT, WEATHER], "stream": stream}


def answered(proxy: str, body: dict[str, Any]) -> tuple[int, str, list[dict[str, Any]]]:
    """(status, content, omens) as a client reads them."""
    if not body["stream"]:
        r = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=20)
        if r.status_code != 200:
            return r.status_code, r.text, []
        got = r.json()
        return 200, got["choices"][0]["message"]["content"], got["sanctum"]["omens"]
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        raw = r.read()
        if r.status_code != 200:
            return r.status_code, raw.decode(), []
    streamed = read_stream(raw)
    return 200, streamed.content, streamed.omens


def reply(stream: bool) -> Step:
    return Step(chunks=content_chunks("Done.")) if stream else Step(body=completion("Done."))


@pytest.mark.parametrize("stream", [False, True])
def test_arguments_the_lenient_reader_mends_go_upstream_mended_and_nothing_else_changes(proxy, fake, stream):
    fake[0].reads_history = True
    fake[0].push(reply(stream))
    body = ask(QUOTES, stream)
    status, content, omens = answered(proxy, body)
    assert (status, content) == (200, "Done.")
    sent = fake[0].requests[0]["messages"]
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == MENDED
    assert {**sent[2], "tool_calls": None} == {**body["messages"][2], "tool_calls": None}
    assert [m for i, m in enumerate(sent) if i != 2] == [m for i, m in enumerate(body["messages"]) if i != 2]
    assert omens == [{"type": "SpellHistoryMended", "round": 0, "message": 2, "spell": "edit_file",
                      "call_id": "call_1", "repairs": ["json_repair"], "as_text": False, "raw": QUOTES}]


@pytest.mark.parametrize("stream", [False, True])
def test_arguments_that_cannot_be_read_go_as_text_with_their_result(proxy, fake, stream):
    fake[0].reads_history = True
    fake[0].push(reply(stream))
    body = ask(CUT, stream)
    status, content, omens = answered(proxy, body)
    assert (status, content) == (200, "Done.")
    sent = fake[0].requests[0]["messages"]
    assert vllm_history_error(fake[0].requests[0]) is None
    assert sent[:2] == body["messages"][:2] and sent[-1] == body["messages"][-1]
    call, result = sent[2], sent[3]
    assert call["role"] == "assistant" and "tool_calls" not in call
    assert call["content"].startswith("Editing.\n<tool_call>") and "First line of the" in call["content"]
    assert result["role"] == "user" and "invalid arguments" in result["content"] and len(sent) == 5
    assert [(o["type"], o["as_text"], o["repairs"], o["raw"]) for o in omens] == [
        ("SpellHistoryMended", True, [], CUT)]


def test_a_history_that_reads_goes_upstream_as_the_client_sent_it(proxy, fake):
    fake[0].reads_history = True
    fake[0].push(reply(False))
    body = ask('{"filePath": "/tmp/test.txt",  "oldString": "hi"}', False)
    assert answered(proxy, body)[::2] == (200, [])
    assert fake[0].requests[0]["messages"] == body["messages"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_replaying_a_cut_function_call_gets_an_answer(proxy, fake, stream):
    fake[0].reads_history = True
    fake[0].push(reply(stream))
    items: list[Any] = [
        {"role": "user", "content": "Write the notes."},
        {"type": "function_call", "call_id": "call_incomplete", "name": "edit_file", "arguments": CUT},
        {"type": "function_call_output", "call_id": "call_incomplete",
         "output": "The tool was not executed because its arguments were invalid."},
        {"role": "user", "content": "Continue."}]
    tools: Any = [{"type": "function", "name": "edit_file", "parameters": EDIT["function"]["parameters"]},
                  {"type": "function", "name": "get_weather", "parameters": CITY}]
    with openai.OpenAI(base_url=proxy + "/v1", api_key="none", max_retries=0) as client:
        if stream:
            with client.responses.stream(model="m", input=items, tools=tools) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(model="m", input=items, tools=tools)
    assert response.output_text == "Done."
    assert b"tool_calls" not in orjson.dumps(fake[0].requests[0]["messages"])
