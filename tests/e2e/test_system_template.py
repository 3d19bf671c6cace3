"""A chat template that allows one system message, first (Qwen3.x's and gpt-oss's rule, raising "System message
must be at the beginning"), on the real llama-server (`--chat-template-file`): Codex's two developer messages,
sent as they are, hit that error; through /v1/responses the proxy merges them into one leading system message
(protocols/system_messages.py) and the request is answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.upstreams.embedded import LlamaServer
from tests.e2e.conftest import _serve

pytestmark = pytest.mark.e2e
TEMPLATE = Path(__file__).parent / "templates" / "leading_system_only.jinja"
DEVELOPER = [{"role": "developer", "content": "You are a coding agent."},
             {"role": "developer", "content": "Skills: none."}]
ASK = "What's the weather in Paris?"
TOOL = {"type": "function", "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def strict_template() -> Iterator[LlamaServer]:
    yield from _serve(jinja=True, extra_args=("--chat-template-file", str(TEMPLATE)))


def test_the_template_refuses_a_second_system_message_as_llama_server_reads_developer(strict_template):
    got = httpx.post(strict_template.base_url + "/chat/completions", timeout=60, json={
        "model": "m", "max_tokens": 8, "messages": [*DEVELOPER, {"role": "user", "content": ASK}]})
    assert got.status_code >= 400 and "System message must be at the beginning" in got.text


@pytest.mark.parametrize("stream", [False, True])
def test_codex_shaped_request_through_responses_is_answered(strict_template, proxy_to, stream):
    proxy = proxy_to(strict_template, constrain="always")
    body: dict[str, Any] = {"model": "smollm2", "temperature": 0, "stream": stream, "tools": [TOOL],
                            "input": [*({"type": "message", **m} for m in DEVELOPER),
                                      {"role": "user", "content": ASK}]}
    got = httpx.post(proxy + "/v1/responses", json=body, timeout=120)
    assert got.status_code == 200, got.text
    if stream:
        events = [orjson.loads(line[6:]) for line in got.text.splitlines() if line.startswith("data: ")]
        response = events[-1]["response"]
        assert events[-1]["type"] == "response.completed", events[-1]
    else:
        response = got.json()
    calls = [i for i in response["output"] if i["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather"] and orjson.loads(calls[0]["arguments"]) == {"city": "Paris"}
