"""The OpenAI chat shapes (core/openai_chat.py) as bytes: key order is the wire's, the upstream's own fields go
where the writers put them, the proxy's keys are never overwritten by them."""

from __future__ import annotations

import orjson

from sanctum_proxy.core import openai_chat as oc

META = {"id": "c", "created": 1, "model": "m", "system_fingerprint": "fp"}
SANCTUM: oc.Sanctum = {"mode": "native", "rounds": 1, "omens": [], "trace_id": "t"}
HEAD = b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":'


def test_a_chunk_has_the_fingerprint_before_its_choices_and_the_index_of_its_choice() -> None:
    chunk = oc.chunk(META, oc.text_delta("reasoning_content", "hm"), None, 2)
    assert orjson.dumps(chunk) == HEAD + b'[{"index":2,"delta":{"reasoning_content":"hm"},"finish_reason":null}]}'
    assert b"system_fingerprint" not in orjson.dumps(oc.chunk({**META, "system_fingerprint": None}, {}))


def test_closing_without_usage_puts_the_round_fields_and_sanctum_on_the_finish_chunk() -> None:
    finish = oc.chunk(META, {}, "stop")
    last = oc.closing(finish, META, None, {"timings": {"n": 1}, "sanctum": "upstream's"}, SANCTUM)
    assert [orjson.dumps(c) for c in last] == [
        HEAD + b'[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"n":1},'
               b'"sanctum":{"mode":"native","rounds":1,"omens":[],"trace_id":"t"}}']


def test_closing_with_usage_adds_a_usage_chunk_that_carries_them() -> None:
    finish = oc.chunk(META, {}, "tool_calls")
    last = oc.closing(finish, {"id": "d", "created": 2, "model": "n"}, {"total_tokens": 3}, {"x": 1}, SANCTUM)
    assert [orjson.dumps(c) for c in last] == [
        HEAD + b'[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}',
        b'{"id":"d","object":"chat.completion.chunk","created":2,"model":"n","choices":[],"usage":{"total_tokens":3},'
        b'"x":1,"sanctum":{"mode":"native","rounds":1,"omens":[],"trace_id":"t"}}']


def test_a_call_streams_as_its_head_then_its_arguments_and_legacy_as_a_function_call() -> None:
    call = oc.tool_call("call_1", "f", '{"a":1}')
    assert [orjson.dumps(d) for d in oc.tool_call_deltas(1, call)] == [
        b'{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}',
        b'{"tool_calls":[{"index":1,"function":{"arguments":"{\\"a\\":1}"}}]}']
    assert [orjson.dumps(d) for d in oc.function_call_deltas(call)] == [
        b'{"function_call":{"name":"f","arguments":""}}', b'{"function_call":{"arguments":"{\\"a\\":1}"}}']


def test_a_completion_keeps_its_own_keys_over_the_rounds_fields_and_ends_with_sanctum() -> None:
    message = oc.message({"content": "hi", "role": "assistant"})
    choice = oc.choice(0, message, "stop", {"logprobs": {"content": []}, "stop_reason": None})
    body = oc.completion(META, [choice], {"total_tokens": 3}, {"model": "other", "timings": {}}, SANCTUM)
    assert orjson.dumps(body) == (
        b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":{"content":[]},"stop_reason":null,'
        b'"finish_reason":"stop"}],"usage":{"total_tokens":3},"system_fingerprint":"fp","timings":{},'
        b'"sanctum":{"mode":"native","rounds":1,"omens":[],"trace_id":"t"}}')


def test_a_message_with_content_and_refusal_is_passed_as_it_came() -> None:
    upstream = {"content": None, "refusal": "no", "role": "assistant"}
    assert list(oc.message(upstream)) == ["content", "refusal", "role"]


def test_an_error_body_has_the_four_keys_then_its_own() -> None:
    body = oc.error_body("bad", "invalid_request_error", None, None, {"upstream_status": 400})
    assert orjson.dumps(body) == (b'{"error":{"message":"bad","type":"invalid_request_error","param":null,'
                                  b'"code":null,"upstream_status":400}}')
