"""The Responses and Messages APIs served by the proxy in front of the real llama-server (SmolLM2, --no-jinja,
constrain = "always"): the proxy speaks chat completions upstream (llama-server's own /v1/responses and
/v1/messages are never used), and each SDK gets a tool call in its own shapes, streamed and not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

pytestmark = pytest.mark.e2e
QUESTION = "What's the weather in Paris?"
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def proxy(constrained_proxy: str) -> str:
    return constrained_proxy


@pytest.fixture
def openai_client(proxy: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy + "/v1", api_key="unused", max_retries=0) as client:
        yield client  # closed after: its pooled connection would outlive the proxy


@pytest.fixture
def anthropic_client(proxy: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy, api_key="unused", max_retries=0) as client:
        yield client


def test_responses_api_gets_a_function_call_item(openai_client):
    client = openai_client
    tools: Any = [{"type": "function", "name": "get_weather", "description": "Current weather for a city.",
                   "parameters": PARAMETERS}]
    response = client.responses.create(model="smollm2", input=QUESTION, tools=tools, temperature=0)
    (item,) = [i for i in response.output if i.type == "function_call"]
    assert item.name == "get_weather" and orjson.loads(item.arguments) == {"city": "Paris"}
    with client.responses.stream(model="smollm2", input=QUESTION, tools=tools, temperature=0) as stream:
        final = stream.get_final_response()
    (item,) = [i for i in final.output if i.type == "function_call"]
    assert item.name == "get_weather" and orjson.loads(item.arguments) == {"city": "Paris"}


def test_messages_api_gets_a_tool_use_block(anthropic_client):
    client = anthropic_client
    tools: Any = [{"name": "get_weather", "description": "Current weather for a city.", "input_schema": PARAMETERS}]
    messages: Any = [{"role": "user", "content": QUESTION}]
    message = client.messages.create(model="smollm2", max_tokens=64, tools=tools, messages=messages,
                                     extra_body={"temperature": 0})
    (block,) = [b for b in message.content if b.type == "tool_use"]
    assert block.name == "get_weather" and block.input == {"city": "Paris"} and message.stop_reason == "tool_use"
    with client.messages.stream(model="smollm2", max_tokens=64, tools=tools, messages=messages,
                                extra_body={"temperature": 0}) as stream:
        final = stream.get_final_message()
    (block,) = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "get_weather" and block.input == {"city": "Paris"}
