"""/v1/messages as agents use it, on the real llama-server: a chat template that allows one system message, first
(Qwen3.x's rule, `--chat-template-file`), refuses Claude Code's shape sent as it is (a `system` message after the
user's turn); through /v1/messages the proxy merges it into the leading one (protocols/system_messages.py) and the
call is answered, streamed and not. POST /v1/messages/count_tokens is llama.cpp's own count of the rendered prompt.

Claude Code itself does not fit the embedded SmolLM2: its default request (12 tools, about 30 KB of tool
definitions, 7 KB of system text) is 11,642 tokens once the tools are in the prompt, over the model's 8,192-token
context (tests/e2e/test_coding_agents_real.py: the proxy's context_length_exceeded, which Claude Code shows as
"Prompt is too long" with the proxy's message).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

pytestmark = pytest.mark.e2e
ENV = "# Environment\nYou have been invoked in the following environment:\n - Primary working directory: /tmp/w"
ASK = "What's the weather in Paris?"
TOOL = {"name": "get_weather", "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_the_template_refuses_claude_codes_late_system_message_sent_as_it_is(strict_template):
    got = httpx.post(strict_template.base_url + "/chat/completions", timeout=60, json={
        "model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "You are an agent."},
                                                    {"role": "user", "content": ASK},
                                                    {"role": "system", "content": ENV}]})
    assert got.status_code >= 400 and "System message must be at the beginning" in got.text


@pytest.mark.parametrize("stream", [False, True])
def test_claude_code_shaped_request_through_messages_is_answered(strict_template, proxy_to, stream):
    proxy = proxy_to(strict_template, constrain="always")
    body: dict[str, Any] = {
        "model": "smollm2", "max_tokens": 200, "extra_body": {"temperature": 0}, "tools": [TOOL],
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.bc4;"},
                   {"type": "text", "text": "You are an agent. Use the tools."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": ASK}]},
                     {"role": "system", "content": [{"type": "text", "text": ENV}]}]}
    with anthropic.Anthropic(base_url=proxy, api_key="x", max_retries=0, timeout=120) as client:
        if stream:
            with client.messages.stream(**body) as streaming:
                message = streaming.get_final_message()
        else:
            message = client.messages.create(**body)
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and [u.name for u in uses] == ["get_weather"]
    assert uses[0].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert message.model == "smollm2"


def test_count_tokens_is_llama_servers_count(strict_template, proxy_to):
    proxy = proxy_to(strict_template)
    short = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]}
    got = httpx.post(proxy + "/v1/messages/count_tokens", json=short, timeout=60)
    assert got.status_code == 200 and got.headers["x-sanctum-token-count"] == "exact"
    rendered = httpx.post(strict_template.root_url + "/apply-template", json=short, timeout=60).json()["prompt"]
    tokens = httpx.post(strict_template.root_url + "/tokenize", json={"content": rendered, "add_special": True},
                        timeout=60).json()["tokens"]
    assert got.json() == {"input_tokens": len(tokens)}
    longer = {**short, "system": "Be brief.", "messages": [{"role": "user", "content": "hi " * 50}]}
    assert httpx.post(proxy + "/v1/messages/count_tokens", json=longer, timeout=60).json()["input_tokens"] > 50
