"""Ollama's native door in front of the real llama-server (SmolLM2, --no-jinja, constrain = "always"): the
`ollama` Python client, pointed at the proxy's root, gets a tool call in Ollama's shape (arguments an object),
streamed and not, and the loop's next turn an answer; the native request is translated to /v1 upstream."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

ollama = pytest.importorskip("ollama")

pytestmark = pytest.mark.e2e
QUESTION = "What's the weather in Paris?"
OPTIONS = {"temperature": 0, "num_predict": 96}


def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
      city: The city's name
    """
    return f"{city}: sunny, 21 C"


def ask(client: Any, messages: list[Any], stream: bool) -> tuple[list[Any], str]:
    if not stream:
        r = client.chat(model="smollm2", messages=messages, tools=[get_weather], options=OPTIONS)
        return list(r.message.tool_calls or []), r.message.content or ""
    calls, content = [], ""
    for part in client.chat(model="smollm2", messages=messages, tools=[get_weather], options=OPTIONS, stream=True):
        calls += part.message.tool_calls or []
        content += part.message.content or ""
    return calls, content


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_the_ollama_client_gets_the_call_and_then_an_answer(constrained_proxy, stream):
    client = ollama.Client(host=constrained_proxy, timeout=120)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    calls, content = ask(client, messages, stream)
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    messages += [{"role": "assistant", "content": content, "tool_calls": calls},
                 {"role": "tool", "content": get_weather("Paris"), "tool_name": "get_weather"}]
    calls, content = ask(client, messages, stream)
    assert calls or content.strip()  # the model's next turn: an answer (or another call), never an error


def test_the_stream_is_ndjson_ending_in_one_done_object(constrained_proxy):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    body = {"model": "smollm2", "messages": [{"role": "user", "content": QUESTION}], "tools": tools,
            "options": OPTIONS}
    r = httpx.post(constrained_proxy + "/api/chat", json=body, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    objects = [orjson.loads(line) for line in r.content.splitlines() if line.strip()]
    assert [o["done"] for o in objects].count(True) == 1 and objects[-1]["done"] is True
    assert objects[-1]["done_reason"] and objects[-1]["eval_count"] > 0
    calls = [c for o in objects for c in o["message"].get("tool_calls", [])]
    assert calls[0]["function"]["arguments"] == {"city": "Paris"}
