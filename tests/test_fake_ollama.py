"""The fake Ollama answers in the shapes and with the errors of Ollama's own source (tests/fakes/ollama.py)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.ollama import (
    HARMONY_PARSE_ERROR,
    NDJSON,
    QWEN3_PARSE_ERROR,
    call,
    fail,
    fail_midstream,
    no_tools_message,
    say,
)
from tests.fakes.ollama_model import CITY, MODEL_FOR, SCENARIOS, OllamaModel

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ASK = {"model": "llama3.2:1b", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
METRICS = ["total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
           "eval_duration"]


def lines(r: httpx.Response) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in r.content.splitlines() if x.strip()]


def post(url: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(url + "/api/chat", json=body, timeout=10, **kw)


def test_a_chat_streams_ndjson_when_stream_is_absent(fake_ollama):
    fake, url = fake_ollama
    fake.push(say("Sunny in Paris."))
    r = post(url, ASK)
    assert r.status_code == 200 and r.headers["content-type"] == NDJSON
    got = lines(r)
    assert all(not x["done"] for x in got[:-1]) and got[-1]["done"] is True
    assert "".join(x["message"]["content"] for x in got) == "Sunny in Paris."
    assert list(got[0]) == ["model", "created_at", "message", "done"]  # no metrics before the end
    assert got[-1]["done_reason"] == "stop" and all(k in got[-1] for k in METRICS)
    assert got[-1]["created_at"].endswith("Z") and got[0]["message"]["role"] == "assistant"


def test_a_chat_with_stream_false_is_one_object(fake_ollama):
    fake, url = fake_ollama
    fake.push(say("Sunny.", thinking="Let me think."))
    r = post(url, {**ASK, "model": "qwen3:0.6b", "stream": False, "think": True})
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    body = r.json()
    assert body["message"] == {"role": "assistant", "content": "Sunny.", "thinking": "Let me think."}
    assert body["done"] is True and body["done_reason"] == "stop" and body["eval_count"] == 9


def test_a_native_call_has_object_arguments_an_index_and_an_id(fake_ollama):
    fake, url = fake_ollama
    fake.push(call("get_weather", {"city": CITY}), call("get_weather", {"city": CITY}))
    streamed = lines(post(url, ASK))
    whole = post(url, {**ASK, "stream": False}).json()
    expected = [{"id": "call_4ppqdwzb", "function": {"index": 0, "name": "get_weather", "arguments": {"city": CITY}}}]
    assert [x["message"].get("tool_calls") for x in streamed if x["message"].get("tool_calls")] == [expected]
    assert whole["message"] == {"role": "assistant", "content": "", "tool_calls": expected}


def test_thinking_is_streamed_before_content(fake_ollama):
    fake, url = fake_ollama
    fake.push(say("Answer.", thinking="Hmm, thinking."))
    got = lines(post(url, {**ASK, "model": "qwen3:0.6b", "think": True}))
    kinds = ["thinking" if x["message"].get("thinking") else "content" for x in got[:-1]]
    assert kinds == sorted(kinds, key=lambda k: k != "thinking") and "thinking" in kinds and "content" in kinds


@pytest.mark.parametrize("stream", [True, False])
def test_a_parser_error_before_output_is_a_500_even_when_streaming(fake_ollama, stream):
    fake, url = fake_ollama
    fake.push(fail(500, QWEN3_PARSE_ERROR))
    r = post(url, {**ASK, "stream": stream})
    assert r.status_code == 500 and r.json() == {"error": QWEN3_PARSE_ERROR}
    assert r.headers["content-type"].startswith("application/json")


def test_a_parser_error_after_output_is_an_in_band_line_then_the_end(fake_ollama):
    fake, url = fake_ollama
    fake.push(fail_midstream(HARMONY_PARSE_ERROR), fail_midstream(HARMONY_PARSE_ERROR))
    r = post(url, ASK)
    got = lines(r)
    assert r.status_code == 200 and got[-1] == {"error": HARMONY_PARSE_ERROR}
    assert not any(x.get("done") for x in got)
    whole = post(url, {**ASK, "stream": False})
    assert whole.status_code == 500 and whole.json() == {"error": HARMONY_PARSE_ERROR}


def test_the_refusals_come_in_chat_handlers_words(fake_ollama):
    fake, url = fake_ollama
    no_tools = post(url, {**ASK, "model": "gemma:2b"})
    assert no_tools.status_code == 400
    assert no_tools.json() == {"error": "registry.ollama.ai/library/gemma:2b does not support tools"}
    assert no_tools_message("gemma:2b") == no_tools.json()["error"]
    missing = post(url, {**ASK, "model": "nope:7b"})
    assert missing.status_code == 404 and missing.json() == {"error": "model 'nope:7b' not found"}
    thinking = post(url, {**ASK, "think": True})
    assert thinking.status_code == 400 and thinking.json() == {"error": '"llama3.2:1b" does not support thinking'}
    assert post(url, {**ASK, "model": ""}).json() == {"error": "model is required"}
    empty = httpx.post(url + "/api/chat", content=b"", timeout=10)
    assert empty.status_code == 400 and empty.json() == {"error": "missing request body"}
    assert httpx.post(url + "/api/chat", content=b"{x", timeout=10).status_code == 400
    load = post(url, {"model": "llama3.2:1b", "messages": []}).json()
    assert load["done"] is True and load["done_reason"] == "load"


def test_every_chat_body_is_recorded_as_sent(fake_ollama):
    fake, url = fake_ollama
    body = {**ASK, "options": {"num_ctx": 8192, "top_k": 20, "temperature": 0.2}, "keep_alive": "10m",
            "format": {"type": "object"}}
    post(url, body)
    post(url, {**ASK, "model": "gemma:2b"})  # refused, still recorded
    assert fake.requests[0] == body and fake.requests[1]["model"] == "gemma:2b"
    assert [(m, p) for m, p, _ in fake.seen] == [("POST", "/api/chat")] * 2


def test_discovery_answers_as_ollama_does(fake_ollama):
    fake, url = fake_ollama
    root = httpx.get(url + "/")
    assert root.text == "Ollama is running" and root.headers["content-type"].startswith("text/plain")
    assert httpx.head(url + "/").status_code == 200
    assert httpx.get(url + "/api/version").json() == {"version": "0.33.0"}
    tags = httpx.get(url + "/api/tags").json()["models"]
    assert [m["name"] for m in tags] == ["qwen3:0.6b", "llama3.2:1b", "gemma:2b"]
    assert set(tags[0]) == {"name", "model", "modified_at", "size", "digest", "details"}
    show = httpx.post(url + "/api/show", json={"model": "qwen3:0.6b"}).json()
    assert show["capabilities"] == ["completion", "tools", "thinking"]
    assert show["model_info"]["qwen3.context_length"] == 40960 and "<tool_call>" in show["template"]
    fake.models[1].num_ctx = 8192
    assert "num_ctx                        8192" in httpx.post(url + "/api/show", json={"model": "llama3.2:1b"}
                                                            ).json()["parameters"]
    gone = httpx.post(url + "/api/show", json={"model": "nope"})
    assert gone.status_code == 404 and gone.json() == {"error": "model 'nope' not found"}
    ps = httpx.get(url + "/api/ps").json()["models"][0]
    assert {"expires_at", "size_vram", "context_length"} <= set(ps)
    assert httpx.get(url + "/api/nothing").text == "404 page not found"
    assert httpx.get(url + "/api/chat").status_code == 405


def test_generate_and_embeddings(fake_ollama):
    _, url = fake_ollama
    gen = httpx.post(url + "/api/generate", json={"model": "llama3.2:1b", "prompt": "hi"})
    assert gen.headers["content-type"] == NDJSON and lines(gen)[-1]["done"] is True
    whole = httpx.post(url + "/api/generate", json={"model": "llama3.2:1b", "prompt": "hi", "stream": False}).json()
    assert whole["response"] == "Sunny and mild." and whole["context"]
    embed = httpx.post(url + "/api/embed", json={"model": "llama3.2:1b", "input": ["a", "bb"]}).json()
    assert len(embed["embeddings"]) == 2 and embed["model"] == "llama3.2:1b"
    assert httpx.post(url + "/api/embeddings", json={"model": "llama3.2:1b", "prompt": "a"}).json()["embedding"]


def test_the_v1_layer_writes_openai_shapes(fake_ollama):
    fake, url = fake_ollama
    openai = {"model": "llama3.2:1b", "messages": ASK["messages"], "tools": TOOLS}
    fake.push(call("get_weather", {"city": CITY}), call("get_weather", {"city": CITY}))
    whole = httpx.post(url + "/v1/chat/completions", json=openai).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and whole["system_fingerprint"] == "fp_ollama"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    with httpx.stream("POST", url + "/v1/chat/completions", json={**openai, "stream": True}) as r:
        events = [x for x in r.iter_lines() if x.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and orjson.loads(events[-2][6:])["choices"][0]["finish_reason"] == "tool_calls"
    refused = httpx.post(url + "/v1/chat/completions", json={**openai, "model": "gemma:2b"})
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"
    assert fake.v1_requests[0] == openai and not fake.requests  # /v1 is not recorded as native


def test_the_v1_layer_loses_a_mid_stream_error(fake_ollama):
    fake, url = fake_ollama
    fake.push(fail_midstream(HARMONY_PARSE_ERROR))
    body = {"model": "llama3.2:1b", "messages": ASK["messages"], "tools": TOOLS, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body) as r:
        events = [x for x in r.iter_lines() if x.startswith("data: ")]
    assert events[-1] != "data: [DONE]" and orjson.loads(events[-1][6:])["model"] == ""


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_model_calls_then_answers_from_the_result(fake_ollama, scenario):
    fake, url = fake_ollama
    model = OllamaModel(scenario)
    fake.responder = model
    first = post(url, {**ASK, "model": model.model, "stream": False, "think": scenario == "think" or None})
    if scenario == "no_tools":
        assert first.status_code == 400 and "does not support tools" in first.json()["error"]
    elif scenario in ("parser_500", "parser_midstream"):
        assert first.status_code == 500 and first.json()["error"] in (QWEN3_PARSE_ERROR, HARMONY_PARSE_ERROR)
    elif scenario in ("native", "think"):
        assert first.json()["message"]["tool_calls"][0]["function"]["arguments"] == {"city": CITY}
        assert bool(first.json()["message"].get("thinking")) == (scenario == "think")
    elif scenario == "swallowed":
        assert first.json()["message"] == {"role": "assistant", "content": ""}
    else:
        assert "get_weather" in first.json()["message"]["content"]
    history = [*ASK["messages"], {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": CITY}}}]},
               {"role": "tool", "content": "Paris: sunny", "tool_name": "get_weather"}]
    final = post(url, {**ASK, "model": model.model, "messages": history, "stream": False})
    expected = 400 if scenario == "no_tools" else 200
    assert final.status_code == expected
    if expected == 200:
        assert final.json()["message"]["content"] == "The weather tool said: Paris: sunny"


def test_the_model_answers_prompted_and_constrained_rounds(fake_ollama):
    fake, url = fake_ollama
    fake.responder = OllamaModel("no_tools")
    system = {"role": "system", "content": "Tools:\n- get_weather: Weather for a city"}
    prompted = post(url, {"model": "gemma:2b", "messages": [system, *ASK["messages"]], "stream": False}).json()
    assert prompted["message"]["content"].startswith("<tool_call>{\"name\": \"get_weather\"")
    constrained = post(url, {"model": "gemma:2b", "messages": ASK["messages"], "stream": False,
                             "format": {"type": "object"}}).json()
    assert orjson.loads(constrained["message"]["content"]) == {"name": "get_weather", "arguments": {"city": CITY}}
    assert MODEL_FOR["no_tools"] == "gemma:2b"
