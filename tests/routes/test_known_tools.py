"""A tool list checked once is not checked again on the same door (routes/chat.off_loop_if_heavy), but another
door reads the same bytes as its own tools and checks them itself."""

from __future__ import annotations

import httpx

from tests.fakes.upstream import Step, completion

# Over INLINE_TOOLS_BYTES, so the list is keyed and remembered once its checks pass.
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city. " * 200,
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_known_tool_list_is_still_checked_on_another_door(proxy, fake):
    anthropic_tool = {"name": "get_weather", "description": TOOL["function"]["description"],
                      "input_schema": TOOL["function"]["parameters"]}
    fake[0].push(Step(body=completion("Sunny.")), Step(body=completion("Sunny.")))
    for _ in range(2):  # the second read skips the checks this door already passed
        answer = httpx.post(proxy + "/v1/messages", json={"model": "m", "max_tokens": 64, "messages": ASK,
                                                          "tools": [anthropic_tool]}, timeout=20)
        assert answer.status_code == 200, answer.text
    refused = httpx.post(proxy + "/v1/chat/completions", json={"model": "m", "messages": ASK,
                                                               "tools": [anthropic_tool]}, timeout=20)
    assert refused.status_code == 400, refused.text  # an Anthropic tool is no chat completions tool
    assert refused.json()["error"]["param"] == "tools"


def test_a_tool_list_that_failed_its_checks_fails_again(proxy, fake):
    bad = {**TOOL, "function": {**TOOL["function"], "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "pattern": "("}}}}}
    for _ in range(2):
        answer = httpx.post(proxy + "/v1/chat/completions", json={"model": "m", "messages": ASK, "tools": [bad]},
                            timeout=20)
        assert answer.status_code == 400 and "not a valid JSON Schema" in answer.text, answer.text
