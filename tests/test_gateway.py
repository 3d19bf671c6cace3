"""The gateway through real sockets: endpoints, pass-through, controls and every error row of contract 7."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import openai
import orjson

from tests.fakes.upstream import LLAMA_NO_JINJA, Step, completion, content_chunks
from tests.polling import wait_until

MSG = [{"role": "user", "content": "hi"}]


def test_healthz_answers_while_upstream_is_down(make_proxy):
    url = make_proxy(upstream="http://127.0.0.1:9/v1")
    assert httpx.get(url + "/healthz").status_code == 200
    assert httpx.get(url + "/readyz").status_code == 503


def test_readyz_is_200_while_upstream_answers(client):
    assert client.get("/readyz").status_code == 200


def test_models_and_other_v1_paths_pass_through(client, fake):
    assert client.get("/v1/models").json()["data"][0]["id"] == "fake-model"
    r = client.post("/v1/embeddings?x=1", content=b'{"input": "a"}')
    assert r.status_code == 201 and r.headers["x-upstream"] == "yes"
    assert r.json() == {"method": "POST", "path": "/v1/embeddings", "query": "x=1", "body": '{"input": "a"}'}


def test_chat_without_tools_is_forwarded_with_unknown_fields_and_without_sanctum(client, fake):
    upstream, _ = fake
    r = client.post("/v1/chat/completions", json={"model": "m", "messages": MSG, "mirostat": 2,
                                                   "sanctum": {"max_repair_rounds": 1}})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "default answer"
    assert upstream.requests[0]["mirostat"] == 2 and "sanctum" not in upstream.requests[0]
    assert r.headers["x-sanctum-rounds"] == "1" and r.headers["x-sanctum-trace-id"]
    assert r.json()["sanctum"]["rounds"] == 1


def test_openai_sdk_sync_and_stream(proxy, fake):
    upstream, _ = fake
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="unused")
    assert sdk.chat.completions.create(model="m", messages=MSG).choices[0].message.content == "default answer"
    upstream.push(Step(chunks=content_chunks("Hello there, friend")))
    text = "".join(c.choices[0].delta.content or "" for c in
                   sdk.chat.completions.create(model="m", messages=MSG, stream=True) if c.choices)
    assert text == "Hello there, friend"


def test_curl_gets_a_completion(proxy):
    out = subprocess.run(["curl", "-s", proxy + "/v1/chat/completions", "-H", "content-type: application/json",
                          "-d", orjson.dumps({"model": "m", "messages": MSG}).decode()],
                         capture_output=True, check=True, timeout=20)
    assert orjson.loads(out.stdout)["choices"][0]["message"]["content"] == "default answer"


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    return body["error"]


def test_body_that_is_not_json_is_400(client):
    r = client.post("/v1/chat/completions", content=b"{nope")
    assert r.status_code == 400 and error_of(r)["type"] == "invalid_request_error"


def test_body_that_is_not_an_object_is_400(client):
    assert client.post("/v1/chat/completions", json=[1]).status_code == 400


def test_missing_or_malformed_messages_is_400(client):
    assert error_of(client.post("/v1/chat/completions", json={"model": "m"}))["param"] == "messages"
    assert client.post("/v1/chat/completions", json={"messages": [1]}).status_code == 400


def test_invalid_tool_name_schema_or_duplicate_is_400_naming_tools(client):
    bad = [
        [{"type": "function", "function": {"name": "has space"}}],
        [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 3}}}],
        [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}],
    ]
    for tools in bad:
        r = client.post("/v1/chat/completions", json={"messages": MSG, "tools": tools})
        assert r.status_code == 400 and error_of(r)["param"] == "tools", r.text


def test_body_over_limit_is_413(make_proxy):
    url = make_proxy(max_body_bytes=1000)
    r = httpx.post(url + "/v1/chat/completions", content=b"x" * 5000)
    assert r.status_code == 413 and error_of(r)["type"] == "invalid_request_error"
    assert r.headers["x-should-retry"] == "false"  # the same body would be refused again


def test_wrong_api_key_is_401_where_keys_are_configured(make_proxy):
    url = make_proxy(api_keys=["sk-good"])
    r = httpx.post(url + "/v1/chat/completions", json={"messages": MSG}, headers={"authorization": "Bearer bad"})
    assert r.status_code == 401 and error_of(r)["type"] == "invalid_api_key"
    ok = httpx.post(url + "/v1/chat/completions", json={"messages": MSG}, headers={"authorization": "Bearer sk-good"})
    assert ok.status_code == 200


def test_unreachable_upstream_is_502(make_proxy):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = make_proxy(upstream=f"http://127.0.0.1:{port}/v1")
    r = httpx.post(url + "/v1/chat/completions", json={"messages": MSG})
    assert r.status_code == 502 and error_of(r)["type"] == "upstream_unreachable"


def test_slow_upstream_is_504(make_proxy, fake):
    fake[0].push(Step(body=completion("late"), delay=2))
    url = make_proxy(read_timeout=0.3)
    r = httpx.post(url + "/v1/chat/completions", json={"messages": MSG}, timeout=10)
    assert r.status_code == 504 and error_of(r)["type"] == "upstream_timeout"


def test_other_upstream_errors_keep_status_and_message(client, fake):
    fake[0].push(Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1]))
    r = client.post("/v1/chat/completions", json={"messages": MSG})
    assert r.status_code == 500
    assert error_of(r)["type"] == "upstream_error"
    assert error_of(r)["message"] == "tools param requires --jinja flag"


def test_bad_control_value_is_400_naming_it(client):
    r = client.post("/v1/chat/completions", json={"messages": MSG}, headers={"x-sanctum-spell-calling": "magic"})
    assert r.status_code == 400 and "spell_calling" in error_of(r)["message"]
    r = client.post("/v1/chat/completions", json={"messages": MSG, "sanctum": {"max_repair_rounds": 11}})
    assert r.status_code == 400 and "max_repair_rounds" in error_of(r)["message"]


def test_client_disconnect_cancels_the_upstream_stream(proxy, fake):
    upstream, _ = fake
    upstream.push(Step(chunks=content_chunks("x" * 400, size=1), chunk_delay=0.02))
    with httpx.stream("POST", proxy + "/v1/chat/completions",
                      json={"messages": MSG, "stream": True}) as r:
        for _ in r.iter_bytes():
            break
    wait_until(lambda: upstream.disconnected, 5, "the upstream stream to be cancelled")
    assert upstream.disconnected == 1


def test_help_documents_every_flag():
    out = subprocess.run([sys.executable, "-m", "sanctum_proxy", "--help"], capture_output=True, text=True,
                         timeout=30).stdout
    for flag in ("--upstream", "--host", "--port", "--config", "--spell-calling", "--max-repair-rounds",
                 "--log-level", "--embedded", "--constrain"):
        assert flag in out


def test_invalid_setting_stops_startup_with_exit_2_naming_it():
    r = subprocess.run([sys.executable, "-m", "sanctum_proxy", "--max-repair-rounds", "99"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "max_repair_rounds" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_settings_precedence_flag_over_env_over_file(tmp_path, monkeypatch):
    from sanctum_proxy.config import load_settings
    f = tmp_path / "c.toml"
    f.write_text('port = 1111\nmax_repair_rounds = 4\nspell_calling = "prompted"\n')
    monkeypatch.setenv("SANCTUM_MAX_REPAIR_ROUNDS", "5")
    s = load_settings({"spell_calling": "native"}, f)
    assert (s.port, s.max_repair_rounds, s.spell_calling) == (1111, 5, "native")


async def test_openai_async_sdk_and_ollama_style_whole_call_chunk(proxy, fake):
    chunk = {"id": "chatcmpl-o", "object": "chat.completion.chunk", "created": 1, "model": "qwen2.5",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "call_o1", "index": 0, "type": "function",
                  "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]}, "finish_reason": None}]}
    done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    fake[0].push(Step(chunks=[chunk, done]))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    sdk = openai.AsyncOpenAI(base_url=proxy + "/v1", api_key="x")
    async with sdk.chat.completions.stream(model="qwen2.5", messages=MSG, tools=tools) as stream:
        final = await stream.get_final_completion()
    await sdk.close()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and orjson.loads(call.function.arguments) == {"city": "Oslo"}
