"""A request held against the model's context. Toward Ollama, a request longer than the context it would run the
model with gets `options.num_ctx` raised (never lowered) with a SpellContextWidened omen, or a 400 naming the sizes:
pure, then through the proxy in front of the fake Ollama with a Claude Code sized request (12 tools, a long system
prompt, about 12,000 tokens). Toward llama.cpp, a first round that cannot fit its /props n_ctx is answered with
`context_length_exceeded` naming both sizes instead of the upstream's own 400; one that fits on the upstream's
own count is sent, however the estimate reads it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from sanctum_proxy.routes.context import MAX_ROOM, Need, need_of, num_ctx_fit
from sanctum_proxy.upstreams import tokens
from sanctum_proxy.upstreams.capabilities import from_props, from_show
from tests.fakes.ollama import call, say
from tests.fakes.upstream import Step, completion, content_chunks

N_CTX = 150
# A SmolLM2-like llama-server (its template knows no tools: auto mode goes prompted) with a small context
PROPS = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False},
         "default_generation_settings": {"n_ctx": N_CTX}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
# llama.cpp's answer to a prompt over n_ctx (tools/server: format_error_response, ERROR_TYPE_EXCEED_CONTEXT_SIZE)
REFUSAL = {"error": {"code": 400, "message": "request (312 tokens) exceeds the available context size (150 tokens), "
                     "try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 312,
                     "n_ctx": N_CTX}}


def ask(proxy: str, words: str, stream: bool = False) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": words}], "tools": [TOOL], "stream": stream}
    return httpx.post(proxy + "/v1/chat/completions", json=body, timeout=30)


@pytest.fixture
def small(fake: Any, make_proxy: Any) -> str:
    fake[0].props, fake[0].tokenizer = PROPS, True  # the fake's tokenizer counts the rendered prompt's words
    return str(make_proxy())


def test_the_probe_reads_a_slots_context():
    assert from_props(PROPS).context == N_CTX  # type: ignore[union-attr]
    assert from_props({"chat_template_caps": {}, "n_ctx": 4096}).context == 4096  # type: ignore[union-attr]
    assert from_props({"chat_template_caps": {}, "n_ctx": "big"}).context is None  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_prompt_over_the_context_is_refused_with_both_sizes(small, fake, stream):
    r = ask(small, "a " * 300, stream)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["context"] == N_CTX and error["counted"] is True
    assert error["prompt_tokens"] > N_CTX and f"{error['prompt_tokens']} tokens" in error["message"]
    assert f"context of {N_CTX} tokens" in error["message"]
    assert fake[0].requests == []  # never sent


def test_a_prompt_the_estimate_overcounts_is_sent(small, fake):
    fake[0].push(Step(body=completion("Sunny.")))
    r = ask(small, "abcdefghijklmnopqrstuvwxyz0123456789 " * 12)  # with the tools' text ~230 estimated, ~100 words
    assert r.status_code == 200, r.text
    assert len(fake[0].requests) == 1 and fake[0].templated  # counted by the upstream before it was sent


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_the_upstreams_own_context_refusal_names_both_sizes(fake, make_proxy, stream):
    fake[0].props = PROPS  # no tokenizer: the estimate lets it through, and the upstream refuses it
    proxy = make_proxy()
    fake[0].push(Step(status=400, body=REFUSAL))
    r = ask(proxy, "short question", stream)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["prompt_tokens"], error["context"], error["counted"]) == \
        ("context_length_exceeded", 312, N_CTX, True)


def test_without_a_known_context_the_request_goes_as_before(fake, make_proxy):
    fake[0].push(Step(chunks=content_chunks("Sunny.")))
    r = ask(make_proxy(), "a " * 300, stream=True)
    assert r.status_code == 200 and '"finish_reason":"stop"' in r.text and len(fake[0].requests) == 1


NAMES = ["Agent", "Bash", "Edit", "ListAgents", "Read", "ReportFindings", "ScheduleWakeup", "Skill", "ToolSearch",
         "Workflow", "DeferredToolPlaceholder", "Write"]
PARAGRAPH = ("Use this tool when the task needs it. Read the file first, keep edits small, quote paths exactly, and "
             "never guess a value the user did not give. ")


def claude_code_sized() -> tuple[str, list[dict[str, Any]]]:
    """A system prompt and 12 tools the size of Claude Code's (its `claude -p` request is about 12,000 tokens)."""
    tools = [{"name": name, "description": PARAGRAPH * 18,
              "input_schema": {"type": "object", "properties": {"path": {"type": "string", "description": PARAGRAPH},
                                                                "content": {"type": "string"}},
                               "required": ["path"]}} for name in NAMES]
    return PARAGRAPH * 90, tools


def test_the_claude_code_sized_request_is_about_12000_tokens():
    system, tools = claude_code_sized()
    chat = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "Write hello.txt"}],
            "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                        "parameters": t["input_schema"]}} for t in tools]}
    assert 11_000 < tokens.estimate(chat) < 13_500


def test_a_request_that_fits_is_left_alone_and_one_that_does_not_gets_the_next_power_of_two():
    assert num_ctx_fit(Need(3000, 1024), 4096, 40960, 65536, "m").num_ctx is None
    fit = num_ctx_fit(Need(12_000, 4096), 4096, 40960, 65536, "m")
    assert fit.num_ctx == 16384 and fit.refused is None
    assert num_ctx_fit(Need(30_000, 4096), 4096, 40960, 65536, "m").num_ctx == 40960  # the trained length at most
    assert num_ctx_fit(Need(30_000, 4096), 4096, None, 32768, "m").num_ctx == 32768  # the cap where it is unknown


def test_a_client_context_is_never_lowered():
    assert num_ctx_fit(Need(12_000, 1024), 32768, 40960, 65536, "m").num_ctx is None
    assert num_ctx_fit(Need(12_000, 1024), 8192, 40960, 65536, "m").num_ctx == 16384


def test_a_prompt_longer_than_the_model_can_take_is_refused_with_the_sizes():
    fit = num_ctx_fit(Need(12_000, 1024), 4096, 8192, 65536, "gemma:2b")
    assert fit.num_ctx is None and "12000 tokens" in fit.refused and "8192" in fit.refused and "4096" in fit.refused
    capped = num_ctx_fit(Need(12_000, 1024), 4096, 131072, 8192, "m")
    assert "ollama_max_num_ctx is 8192" in capped.refused


def test_the_answer_room_is_what_the_request_names_up_to_a_limit():
    assert need_of({"messages": []}, 200).room == 200 and need_of({"messages": []}, 128_000).room == MAX_ROOM
    assert need_of({"messages": []}, None).room == 1024


def test_the_show_answer_says_the_trained_length_and_the_modelfiles_num_ctx():
    caps = from_show({"capabilities": ["completion"], "parameters": 'num_ctx                        8192\nstop "x"',
                      "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}})
    assert caps is not None and caps.context_length == 40960 and caps.num_ctx == 8192


@pytest.fixture
def ollama(fake_ollama, make_proxy) -> Any:
    fake, url = fake_ollama
    return fake, lambda **flags: make_proxy(upstream=url + "/v1", **flags)


def messages_request(model: str = "qwen3:0.6b") -> dict[str, Any]:
    system, tools = claude_code_sized()
    return {"model": model, "max_tokens": 32000, "system": system, "tools": tools, "stream": False,
            "messages": [{"role": "user", "content": "Create a file named hello.txt containing: hi"}]}


def test_a_claude_code_sized_request_is_sent_with_a_context_that_holds_it(ollama):
    fake, start = ollama
    fake.push(call("Write", {"path": "hello.txt", "content": "hi"}))
    got = httpx.post(start() + "/v1/messages", json=messages_request(), timeout=20)
    assert got.status_code == 200, got.text
    sent = fake.requests[0]
    assert sent["options"] == {"num_predict": 32000, "num_ctx": 16384}  # 4096 (Ollama's default) would cut it
    assert got.headers["x-sanctum-omens"] == "SpellContextWidened=1"


def test_every_round_carries_the_widened_context_and_the_omen_says_why(ollama):
    fake, start = ollama
    fake.push(call("Write", {"content": "hi"}), say('{"name": "Write", "arguments": {"path": "a", "content": "hi"}}'))
    body = messages_request()
    chat = {"model": body["model"], "messages": [{"role": "system", "content": body["system"]}, *body["messages"]],
            "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                        "parameters": t["input_schema"]}} for t in body["tools"]]}
    got = httpx.post(start() + "/v1/chat/completions", json=chat, timeout=20).json()
    widened = got["sanctum"]["omens"][0]
    assert widened["type"] == "SpellContextWidened" and widened["num_ctx"] == 16384 and widened["from"] == 4096
    assert 11_000 < widened["estimated_prompt_tokens"] < 13_500 and widened["answer_room"] == 1024
    assert [r["options"]["num_ctx"] for r in fake.requests] == [16384, 16384]


def test_a_clients_smaller_num_ctx_is_raised_and_a_larger_one_kept(ollama):
    fake, start = ollama
    proxy = start()
    native = {"model": "qwen3:0.6b", "stream": False, "messages": [
        {"role": "system", "content": PARAGRAPH * 400}, {"role": "user", "content": "hi"}]}
    for given, expected in ((8192, 16384), (32768, 32768)):
        fake.push(say("Hello."))
        got = httpx.post(proxy + "/api/chat", json={**native, "options": {"num_ctx": given, "seed": 1}}, timeout=20)
        assert got.status_code == 200, got.text
        assert fake.requests[-1]["options"] == {"num_ctx": expected, "seed": 1}


def test_a_request_longer_than_the_trained_context_is_a_clear_error(ollama):
    fake, start = ollama
    proxy = start()
    got = httpx.post(proxy + "/v1/messages", json=messages_request("gemma:2b"), timeout=20)
    assert got.status_code == 400 and fake.requests == []
    message = got.json()["error"]["message"]
    assert "trained context is 8192 tokens" in message and "gemma:2b" in message
    native = httpx.post(proxy + "/api/chat", json={"model": "gemma:2b", "stream": False, "messages": [
        {"role": "user", "content": PARAGRAPH * 400}]}, timeout=20)
    assert native.status_code == 400 and "trained context is 8192" in native.json()["error"]


def test_a_short_request_asks_nothing_and_sets_nothing(ollama):
    fake, start = ollama
    fake.push(say("Hello."))
    got = httpx.post(start() + "/v1/chat/completions", json={"model": "qwen3:0.6b", "messages": [
        {"role": "user", "content": "hi"}]}, timeout=20)
    assert got.status_code == 200 and "options" not in fake.requests[0]
    assert not [p for _, p, _ in fake.seen if p == "/api/show"]
    assert json.loads(got.headers.get("x-sanctum-omens") or '""') == ""
