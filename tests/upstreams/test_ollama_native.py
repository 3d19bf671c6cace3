"""The pure translation between a round's chat body and Ollama's /api/chat (shapes from api/types.go)."""

from __future__ import annotations

import orjson
import pytest

from sanctum_proxy.core.shapes import OLLAMA_FIELDS
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.upstream_errors import classify, quoted_arguments
from sanctum_proxy.upstreams import ollama_answers as answers
from sanctum_proxy.upstreams.ollama_native import native_request, without_stash

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}
HISTORY = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
    {"role": "assistant", "content": None, "reasoning_content": "A city.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


def test_history_goes_in_ollamas_shape_calls_without_ids_results_named_by_their_call():
    sent = native_request({"model": "qwen3:0.6b", "messages": HISTORY, "tools": [WEATHER]}).body
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is this?", "images": ["iVBORw0KGgo="]},
        {"role": "assistant", "content": "", "thinking": "A city.",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]
    assert sent["tools"] == [WEATHER] and sent["stream"] is False and "options" not in sent


def test_broken_history_arguments_are_mended_into_an_object():
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{'city': 'Paris',}"}}
    sent = native_request({"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]})
    assert sent.body["messages"][0]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}


def test_only_the_sampling_fields_sent_become_options():
    body = {"model": "m", "messages": [], "temperature": 0.2, "max_completion_tokens": 64, "max_tokens": 9,
            "stop": "END", "seed": 7, "top_p": None}
    assert native_request(body).body["options"] == {"temperature": 0.2, "num_predict": 64, "seed": 7,
                                                    "stop": ["END"]}
    assert "options" not in native_request({"model": "m", "messages": []}).body


def test_the_clients_native_fields_arrive_as_it_sent_them_and_win():
    own = {"options": {"num_ctx": 8192, "temperature": 0.5, "repeat_penalty": 1.1}, "keep_alive": "5m",
           "think": "low", "format": "json"}
    body = {"model": "m", "messages": [], "temperature": 0.5, "top_p": 0.9, "reasoning_effort": "high",
            "response_format": {"type": "json_object"}, OLLAMA_FIELDS: own}
    sent = native_request(body).body
    assert list(sent["options"].items())[:3] == list(own["options"].items())  # byte for byte, first
    assert sent["options"] == {**own["options"], "top_p": 0.9}
    assert sent["keep_alive"] == "5m" and sent["think"] == "low" and sent["format"] == "json"
    assert OLLAMA_FIELDS not in sent


def test_response_format_and_reasoning_effort_become_format_and_think():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    sent = native_request({"model": "m", "messages": [], "reasoning_effort": "none",
                           "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert sent.body["format"] == schema and sent.body["think"] is False and not sent.calls_in_content
    assert native_request({"model": "m", "messages": [], "reasoning_effort": "xhigh"}).body["think"] == "max"


def test_a_required_call_is_sent_as_format_with_the_calls_schema():
    body = {"model": "m", "messages": [], "tools": [WEATHER], "tool_choice": "required",
            OLLAMA_FIELDS: {"format": "json"}}
    sent = native_request(body)
    assert sent.calls_in_content and "tool_choice" not in sent.body
    assert sent.body["format"] == cn.answer_schema(Toolbox.of([WEATHER]), text=False, parallel=True)


def test_a_constrained_round_keeps_its_schema_over_the_clients_format():
    schema = cn.answer_schema(Toolbox.of([WEATHER]), text=True, parallel=False)
    body = {"model": "m", "messages": [], "response_format": cn.response_format(schema),
            OLLAMA_FIELDS: {"format": "json", "options": {"num_ctx": 4096}}}
    sent = native_request(body).body
    assert sent["format"] == schema and sent["options"] == {"num_ctx": 4096}


def test_tool_choice_none_sends_no_tools():
    assert "tools" not in native_request({"model": "m", "messages": [], "tools": [WEATHER], "tool_choice": "none"}).body


def test_the_stash_never_goes_to_a_v1_upstream():
    body = {"model": "m", "messages": [], OLLAMA_FIELDS: {"keep_alive": 0}}
    assert without_stash(body) == {"model": "m", "messages": []}
    plain = {"model": "m", "messages": []}
    assert without_stash(plain) is plain


PARIS = {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}
ANSWER = {"model": "qwen3:0.6b", "created_at": "2026-12-04T20:33:28.123456789Z",
          "message": {"role": "assistant", "content": "", "thinking": "Paris, then.", "tool_calls": [PARIS]},
          "done": True, "done_reason": "stop", "total_duration": 412000000, "load_duration": 31000000,
          "prompt_eval_count": 26, "prompt_eval_duration": 52000000, "eval_count": 9, "eval_duration": 318000000}


def test_an_answer_becomes_a_chat_completion_with_ids_made_up_and_arguments_as_text():
    done = answers.completion(ANSWER)
    choice = done["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert choice["message"]["reasoning_content"] == "Paris, then." and choice["finish_reason"] == "tool_calls"
    assert done["usage"] == {"prompt_tokens": 26, "completion_tokens": 9, "total_tokens": 35}
    assert done["created"] == 1796416408 and done["model"] == "qwen3:0.6b"
    assert done[OLLAMA_FIELDS]["load_duration"] == 31000000 and done[OLLAMA_FIELDS]["done_reason"] == "stop"


def test_a_required_calls_answer_object_comes_back_as_the_call():
    answer_object = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
    said = {**ANSWER, "message": {"role": "assistant", "content": answer_object}}
    message = answers.completion(said, calls_in_content=True)["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "get_weather" and not message["content"]
    assert answers.completion(said)["choices"][0]["message"]["content"].startswith('{"name"')


def test_length_stays_length():
    said = {**ANSWER, "message": {"role": "assistant", "content": "It is"}, "done_reason": "length"}
    assert answers.completion(said)["choices"][0]["finish_reason"] == "length"


def line(content: str = "", done: bool = False, **more: object) -> dict:
    out = {"model": "m", "created_at": "2026-12-04T20:33:28.1Z", "message": {"role": "assistant", "content": content},
           "done": done}
    out["message"].update(more)
    return out


def test_stream_lines_become_chunks_role_once_calls_indexed_finish_and_usage_at_the_end():
    chunks = answers.Chunks()
    first = chunks.of(line("It", thinking="hm"))
    assert first[0]["choices"][0]["delta"] == {"role": "assistant", "reasoning_content": "hm", "content": "It"}
    call = {"function": {"index": 0, "name": "f", "arguments": {}}}
    second = chunks.of(line(tool_calls=[call]))
    third = chunks.of(line(tool_calls=[call]))
    assert [c["choices"][0]["delta"]["tool_calls"][0]["index"] for c in second + third] == [0, 1]
    last = chunks.of({**line(done=True), "done_reason": "stop", "prompt_eval_count": 3, "eval_count": 2})
    assert last[-2]["choices"][0]["finish_reason"] == "tool_calls" and last[-1]["usage"]["total_tokens"] == 5
    assert len({c["id"] for c in first + second + last}) == 1 and chunks.done


def test_a_streamed_required_call_is_held_and_given_as_the_call():
    chunks = answers.Chunks(calls_in_content=True)
    out = chunks.of(line('{"name": "f", ')) + chunks.of(line('"arguments": {}}'))
    assert all("content" not in c["choices"][0]["delta"] for c in out)
    last = chunks.of({**line(done=True), "done_reason": "stop"})
    calls = last[0]["choices"][0]["delta"]["tool_calls"]
    assert calls[0]["function"] == {"name": "f", "arguments": "{}"}
    assert last[1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(("status", "message", "verdict"), [
    (500, "failed to parse JSON: unexpected end of JSON input", "upstream_parse_failure"),
    (500, "error parsing tool call: raw='{\"city\": \"Paris\"', err=unexpected end of JSON input",
     "upstream_parse_failure"),
    (500, "unexpected end of JSON input", "upstream_parse_failure"),
    (400, "registry.ollama.ai/library/gemma:2b does not support tools", "tools_unsupported"),
    (404, "model 'x' not found", None),
])
def test_native_errors_are_the_same_repair_triggers_as_on_v1(status, message, verdict):
    error = answers.error_of(status, orjson.dumps({"error": message}))
    assert error.upstream_status == status and error.message == message and classify(error) == verdict


def test_the_harmony_parsers_quote_is_read_from_a_native_error():
    error = answers.error_of(500, orjson.dumps({"error": "error parsing tool call: raw='{\"city\": \"Paris\"}', "
                                                         "err=invalid character"}))
    assert quoted_arguments(error) == '{"city": "Paris"}'


def test_a_midstream_error_line_is_a_500_and_a_body_of_another_shape_keeps_its_text():
    error = answers.line_error({"error": "failed to parse JSON: x"})
    assert isinstance(error, UpstreamError) and error.upstream_status == 500
    assert classify(error) == "upstream_parse_failure" and answers.line_error(line("x")) is None
    assert answers.error_of(404, b"404 page not found").message == "404 page not found"
