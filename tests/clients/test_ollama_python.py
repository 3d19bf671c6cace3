"""The `ollama` Python library in its default configuration (`Client(host=root)`, /api/chat), pointed at the
proxy's root in front of a fake Ollama whose model fumbles its calls: every scenario ends with the right call in
Ollama's shape and the tool loop finished, streamed and not, the client's options reaching /api/chat each round."""

from __future__ import annotations

from typing import Any

import pytest

ollama = pytest.importorskip("ollama")

from tests.fakes.ollama_model import ASK, CITY, SCENARIOS, not_kept, weather  # noqa: E402

OPTIONS = {"num_ctx": 8192, "top_k": 20, "temperature": 0.2}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}


def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
      city: The city's name
    """
    return weather(city)


def turn(client: Any, messages: list[Any], stream: bool, **kw: Any) -> tuple[list[Any], str, str]:
    """One chat turn: (the calls, the content, the thinking), a stream's parts joined as its users join them."""
    if not stream:
        r = client.chat(messages=messages, tools=[get_weather], **kw)
        return list(r.message.tool_calls or []), r.message.content or "", r.message.thinking or ""
    calls, content, thinking = [], "", ""
    for part in client.chat(messages=messages, tools=[get_weather], stream=True, **kw):
        calls += part.message.tool_calls or []
        content += part.message.content or ""
        thinking += part.message.thinking or ""
    return calls, content, thinking


def tool_loop(client: Any, stream: bool, **kw: Any) -> dict[str, Any]:
    """The loop of ollama-python's own tool example: call the tools asked for until the model answers."""
    messages: list[Any] = [{"role": "user", "content": ASK}]
    ran: list[dict[str, Any]] = []
    thoughts = []
    for _ in range(4):
        calls, content, thinking = turn(client, messages, stream, **kw)
        thoughts.append(thinking)
        if not calls:
            return {"text": content, "ran": ran, "thinking": thoughts}
        messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        for c in calls:
            ran.append(dict(c.function.arguments))
            messages.append({"role": "tool", "content": get_weather(**c.function.arguments),
                             "tool_name": c.function.name})
    raise AssertionError(f"no final answer after 4 turns: {messages}")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_tool_loop_ends_with_the_tools_result(ollama_scripted, scenario, stream):
    root, model = ollama_scripted(scenario)
    client = ollama.Client(host=root)
    out = tool_loop(client, stream, model=model.model)
    assert out["ran"] == [{"city": CITY}]
    assert weather(CITY) in out["text"]
    assert all(bool(r.get("stream", True)) == stream for r in model.requests)  # each round streamed as asked


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_correct_call_is_untouched_in_one_round(ollama_scripted, stream):
    root, model = ollama_scripted("native")
    client = ollama.Client(host=root)
    calls, content, _ = turn(client, [{"role": "user", "content": ASK}], stream, model=model.model)
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": CITY})]
    assert content == "" and len(model.requests) == 1
    last = client.chat(model=model.model, messages=[{"role": "user", "content": ASK}], tools=[get_weather])
    assert last.done and last.done_reason == "stop" and (last.prompt_eval_count, last.eval_count) == (26, 9)
    raw = client._client.post("/api/chat", json={"model": model.model, "messages": [{"role": "user", "content": ASK}],
                                                 "tools": [TOOL], "stream": False}).json()
    assert raw["message"]["tool_calls"][0]["id"] == "call_00000003"  # the model's own id (its third round), kept


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_thinking_comes_before_the_call_and_the_answer(ollama_scripted, stream):
    root, model = ollama_scripted("think")
    out = tool_loop(ollama.Client(host=root), stream, model=model.model, think=True)
    assert out["ran"] == [{"city": CITY}] and weather(CITY) in out["text"]
    assert out["thinking"][0].startswith("The user wants the weather") and out["thinking"][1]


def test_streamed_thinking_arrives_live_before_the_call(ollama_scripted):
    root, model = ollama_scripted("think")
    parts = ollama.Client(host=root).chat(model=model.model, messages=[{"role": "user", "content": ASK}],
                                          tools=[get_weather], think=True, stream=True)
    kinds = [k for p in parts for k in (["thinking"] if p.message.thinking else [])
             + (["call"] if p.message.tool_calls else [])]
    assert kinds.count("thinking") > 1 and kinds[-1] == "call" and "call" not in kinds[:-1], kinds


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", ["native", "content_hermes", "parser_500", "think"])
def test_the_clients_options_reach_ollama_on_every_round(ollama_scripted, fake_ollama, scenario, stream):
    root, model = ollama_scripted(scenario)
    think = {"think": True} if scenario == "think" else {}
    out = tool_loop(ollama.Client(host=root), stream, model=model.model, options=OPTIONS, keep_alive="10m", **think)
    assert weather(CITY) in out["text"]
    assert not_kept(fake_ollama[0], model, options=OPTIONS, keep_alive="10m", **think) == []


@pytest.mark.parametrize("via", ["direct", "proxy"])
def test_discovery_answers_as_ollama_does(ollama_scripted, via):
    root, _ = ollama_scripted("native", via)
    client = ollama.Client(host=root)
    assert {m.model for m in client.list().models} >= {"qwen3:0.6b", "llama3.2:1b", "gemma:2b"}
    shown = client.show("qwen3:0.6b")
    assert {"tools", "thinking"} <= set(shown.capabilities or [])
    assert shown.modelinfo["qwen3.context_length"] == 40960
    # the proxy serves tools to every model (prompted where the model has none): its show says so
    assert ("tools" in (client.show("gemma:2b").capabilities or [])) == (via == "proxy")
    assert [m.model for m in client.ps().models] == ["qwen3:0.6b"]
    assert client._client.get("/api/version").json() == {"version": "0.33.0"}
    assert client._client.get("/").text == "Ollama is running"
    assert [client._client.head(path).status_code for path in ("/", "/api/version", "/api/tags")] == [200] * 3
    assert client.embed(model="llama3.2:1b", input=["a", "bb"]).embeddings
    assert client.generate(model="llama3.2:1b", prompt="hi").response == "Sunny and mild."


def test_an_unknown_model_is_ollamas_error_string(ollama_scripted):
    root, _ = ollama_scripted("native")
    with pytest.raises(ollama.ResponseError) as raised:
        ollama.Client(host=root).chat(model="nope:7b", messages=[{"role": "user", "content": ASK}])
    assert raised.value.status_code == 404 and isinstance(raised.value.error, str)
    assert "nope:7b" in raised.value.error


@pytest.mark.parametrize("scenario", ["content_json", "parser_500", "no_tools"])
def test_directly_the_fumbles_reach_the_client(ollama_scripted, scenario):
    """Without the proxy the client gets what Ollama gives: the call as text, a 500, a 400."""
    root, model = ollama_scripted(scenario, "direct")
    client = ollama.Client(host=root)
    if scenario == "content_json":
        calls, content, _ = turn(client, [{"role": "user", "content": ASK}], False, model=model.model)
        assert calls == [] and '"name": "get_weather"' in content
        return
    with pytest.raises(ollama.ResponseError) as raised:
        turn(client, [{"role": "user", "content": ASK}], False, model=model.model)
    assert raised.value.status_code == (500 if scenario == "parser_500" else 400)
