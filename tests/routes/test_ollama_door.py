"""POST /api/chat and Ollama's discovery at the proxy's root, in front of a /v1 upstream (the fake llama-server):
the native request translated to chat and back, repaired calls in Ollama's shape, NDJSON streams, errors as
`{"error": "..."}`, model management kept behind the admin key."""

from __future__ import annotations

import json

import httpx

from sanctum_proxy.core.shapes import OLLAMA_FIELDS
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, completion, content_chunks
from tests.tools import WEATHER

HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
       "stream": False, "options": {"num_ctx": 8192, "temperature": 0.2, "num_predict": 64}, "keep_alive": "5m"}


def lines(response: httpx.Response) -> list[dict]:
    return [json.loads(line) for line in response.text.splitlines() if line]


def test_a_call_written_in_content_comes_back_as_ollamas_call(client, fake):
    fake[0].push(Step(body=completion(HERMES)))
    got = client.post("/api/chat", json=ASK)
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
    answer = got.json()
    assert answer["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert answer["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert answer["message"]["content"] == "" and answer["done"] is True and answer["done_reason"] == "stop"
    assert answer["prompt_eval_count"] > 0 and answer["total_duration"] > 0
    assert answer["sanctum"]["omens"][0]["type"] == "SpellCallRepaired"
    sent = fake[0].requests[0]
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 64  # options with a chat equivalent
    assert OLLAMA_FIELDS not in sent  # the native fields go to Ollama's own /api/chat only, never to a /v1 upstream


def test_streaming_is_the_default_and_ndjson(client, fake):
    fake[0].push(Step(chunks=content_chunks("It is sunny in Paris.")))
    ask = {k: v for k, v in ASK.items() if k != "stream"}
    got = client.post("/api/chat", json=ask)
    assert got.headers["content-type"].startswith("application/x-ndjson")
    objects = lines(got)
    assert "".join(o["message"]["content"] for o in objects) == "It is sunny in Paris."
    assert [o["done"] for o in objects][-1] is True and not any(o["done"] for o in objects[:-1])
    assert objects[-1]["done_reason"] == "stop" and "sanctum" in objects[-1]


def test_a_streamed_repaired_call_is_sent_whole_with_arguments_as_an_object(client, fake):
    fake[0].push(Step(chunks=content_chunks(HERMES)))
    objects = lines(client.post("/api/chat", json={**ASK, "stream": True}))
    calls = [c for o in objects for c in o["message"].get("tool_calls", [])]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert "<tool_call>" not in "".join(o["message"]["content"] for o in objects)


def test_history_in_ollamas_shape_is_paired_with_its_calls(client, fake):
    fake[0].push(Step(body=completion("It is sunny.")))
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
               {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    got = client.post("/api/chat", json={**ASK, "messages": history})
    assert got.status_code == 200 and got.json()["message"]["content"] == "It is sunny."
    call, result = fake[0].requests[0]["messages"][1:]
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_errors_are_ollamas_string(client, fake):
    got = client.post("/api/chat", json={"model": "m", "messages": "no"})
    assert got.status_code == 400 and isinstance(got.json()["error"], str)
    fake[0].push(Step(status=500, body=LLAMA_NO_JINJA[1]), Step(status=500, body=LLAMA_NO_JINJA[1]),
                 Step(status=500, body=LLAMA_NO_JINJA[1]))
    assert isinstance(client.post("/api/chat", json={**ASK, "tools": None}).json()["error"], str)
    assert client.get("/api/chat").status_code == 405
    assert isinstance(client.get("/api/nothing").json()["error"], str)


def test_discovery_answers_as_ollama_does(client, fake):
    assert client.get("/").text == "Ollama is running" and client.head("/").status_code == 200
    assert isinstance(client.get("/api/version").json()["version"], str)


def test_model_management_takes_the_admin_key(client, fake):
    got = client.post("/api/delete", json={"model": "m"})
    assert got.status_code == 403 and "admin" in got.json()["error"]
    assert ("POST", "/api/delete") not in fake[0].stray


def test_passed_paths_reach_the_upstreams_root(client, fake):
    assert client.post("/api/embed", json={"model": "m", "input": "x"}).status_code == 404  # the fake's own 404
    assert ("POST", "/api/embed") in fake[0].stray


def test_discovery_lists_the_upstreams_models_and_a_model_served_prompted_has_tools(client, fake):
    assert [m["name"] for m in client.get("/api/tags").json()["models"]] == ["fake-model"]
    shown = client.post("/api/show", json={"model": "fake-model"}).json()
    assert "tools" in shown["capabilities"] and shown["sanctum"] == {"tools": "prompted"}


def test_another_doors_client_cannot_set_ollamas_options(client, fake):
    fake[0].push(Step(body=completion("Hi.")))
    client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}],
                                              OLLAMA_FIELDS: {"options": {"num_ctx": 1}}})
    assert OLLAMA_FIELDS not in fake[0].requests[0]
