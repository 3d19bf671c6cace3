"""The proxy in front of the real llama-server (SmolLM2-135M-Instruct): what a user of a tiny local model gets.

Ground truth the assertions rest on (test_llama_server_raw.py pins it): with --no-jinja any `tools` is a 500;
with --jinja the template drops tools silently; /props says the template cannot call tools; SmolLM2 ignores a
prompted call format, and follows a json_schema response_format.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.e2e.test_llama_server_raw import ASK, WEATHER  # the same question the raw tier pins
from tests.polling import wait_until

pytestmark = pytest.mark.e2e

DETERMINISTIC = {"temperature": 0, "seed": 42, "max_tokens": 48}




def chat(proxy: str, **body: Any) -> httpx.Response:
    payload = {**DETERMINISTIC, "model": "smollm2", "messages": ASK, "tools": [WEATHER], **body}
    return httpx.post(f"{proxy}/v1/chat/completions", json=payload, timeout=180)


def omen_reasons(response: httpx.Response) -> list[tuple[str, str | None]]:
    return [(o["type"], o.get("reason")) for o in response.json()["sanctum"]["omens"]]


def test_auto_mode_flips_on_the_real_500_and_answers(llama_nojinja, proxy_to):
    proxy = proxy_to(llama_nojinja, probe_capabilities=False)
    first = chat(proxy)
    assert first.status_code == 200, first.text
    assert omen_reasons(first) == [("SpellCallingFallback", "tools_rejected")]
    assert first.json()["sanctum"]["omens"][0]["message"] == "tools param requires --jinja flag"
    assert first.headers["x-sanctum-spell-calling"] == "prompted" and first.json()["sanctum"]["rounds"] == 2
    again = chat(proxy)
    assert again.json()["sanctum"] == {
        **again.json()["sanctum"],
        "rounds": 1,
        "omens": [],
        "mode": "prompted",
    }
    assert httpx.get(f"{proxy}/sanctum/status").json()["modes"][0]["reason"] == "tools_rejected"


def test_probe_of_the_real_props_goes_prompted_before_any_500(llama_nojinja, proxy_to):
    response = chat(proxy_to(llama_nojinja))
    assert response.status_code == 200 and response.json()["sanctum"]["rounds"] == 1
    assert omen_reasons(response) == [("SpellCallingFallback", "capability_probe")]


def test_native_mode_passes_tools_through_and_a_required_call_comes_back_valid(llama_jinja, proxy_to):
    proxy = proxy_to(llama_jinja)
    plain = chat(proxy, sanctum={"spell_calling": "native"})
    assert plain.status_code == 200 and plain.headers["x-sanctum-spell-calling"] == "native"
    assert plain.json()["choices"][0]["message"]["content"]  # the template dropped the tools: prose, no call
    # tool_choice required: the prose is bounced, and the constrained correction round comes back valid.
    forced = chat(proxy, tool_choice="required", sanctum={"spell_calling": "native"})
    assert forced.status_code == 200, forced.text
    call = forced.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and "city" in orjson.loads(call["function"]["arguments"])
    assert ("SpellCallRejected", "missing_call") in omen_reasons(forced)


def test_constrained_mode_yields_valid_calls(llama_nojinja, proxy_to):
    proxy = proxy_to(llama_nojinja, constrain="always")
    for city in ("Paris", "Tokyo", "Lima"):
        messages = [{"role": "user", "content": f"What's the weather in {city}?"}]
        # each prompt read afresh: a reused prompt cache shifts this small model's greedy pick (Tokyo -> Takayama)
        response = chat(proxy, messages=messages, cache_prompt=False)
        assert response.status_code == 200, response.text
        call = response.json()["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather"
        arguments = orjson.loads(call["function"]["arguments"])
        assert list(arguments) == ["city"] and arguments["city"].lower() == city.lower()  # it writes LIMA


def test_constrained_mode_answers_in_text_when_no_tool_fits(llama_nojinja, proxy_to):
    """SmolLM2 takes the call branch for nearly anything; its made-up arguments send the request to a round
    without tools. Either way the client gets text and no call."""
    proxy = proxy_to(llama_nojinja, constrain="always")
    for ask in ("Tell me a joke about cats.", "What is 2 + 2?"):
        response = chat(proxy, messages=[{"role": "user", "content": ask}], max_tokens=64,
                        sanctum={"spell_calling": "prompted"})
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        assert not message.get("tool_calls") and message["content"], (ask, message)
        assert set(omen_reasons(response)) <= {("SpellCallRejected", "ungrounded_arguments"),
                                               ("SpellCallRejected", "malformed_json")}


def test_streaming_through_the_proxy_from_the_real_server(llama_jinja, proxy_to):
    client = openai.OpenAI(base_url=proxy_to(llama_jinja) + "/v1", api_key="unused")
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=ASK,
            stream=True,  # type: ignore[arg-type]
            **DETERMINISTIC,
        )
    )
    client.close()  # its pooled connection would outlive the proxy (a ResourceWarning, an error here)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    direct = httpx.post(
        f"{llama_jinja.base_url}/chat/completions", timeout=180, json={**DETERMINISTIC, "messages": ASK}
    ).json()["choices"][0]["message"]["content"]
    assert len(pieces) > 3 and "".join(pieces) == direct  # live, piece by piece, and nothing lost
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_streamed_constrained_call_from_the_real_server_accumulates_in_the_sdk(llama_nojinja, proxy_to):
    client = openai.OpenAI(base_url=proxy_to(llama_nojinja, constrain="always") + "/v1", api_key="unused")
    with client.chat.completions.stream(
        model="smollm2",
        messages=ASK,
        tools=[WEATHER],  # type: ignore[list-item]
        **DETERMINISTIC,
    ) as stream:
        final = stream.get_final_completion()
    client.close()
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather" and orjson.loads(call.function.arguments) == {"city": "Paris"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_multi_turn_prompted_conversation_with_tool_results(llama_nojinja, proxy_to):
    proxy = proxy_to(llama_nojinja)
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C"},
    ]
    response = chat(proxy, messages=history, max_tokens=32)
    assert response.status_code == 200, response.text  # --no-jinja would 500 on any tool message relayed
    assert response.headers["x-sanctum-spell-calling"] == "prompted"
    message = response.json()["choices"][0]["message"]
    assert message.get("content") or message.get("tool_calls")


def test_surrender_keeps_the_models_real_raw_text(llama_nojinja, proxy_to):
    proxy = proxy_to(llama_nojinja, constrain="off")
    response = chat(
        proxy,
        tool_choice="required",
        max_tokens=24,
        messages=[{"role": "user", "content": "Write one short sentence about cats."}],
        sanctum={"max_repair_rounds": 1},
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "spell_call_parse_error" and error["rounds"] == 2
    assert len(error["rejected"]) == 2 and all(isinstance(t, str) and t.strip() for t in error["rejected"])


@pytest.mark.parametrize("flags", [["--embedded"], []], ids=["embedded", "nothing-at-the-default-upstream"])
def test_embedded_command_answers_an_sdk_tools_request(llama_nojinja, flags):
    if not flags and _answers("http://127.0.0.1:11434/v1/models"):
        pytest.skip("something answers at the default upstream (Ollama's port): no stand-in to test")
    # llama_nojinja only proves the binary and the model are here (else the tier skips); the command starts its own.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SANCTUM_") or k.startswith("SANCTUM_LLAMA")
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sanctum_proxy", *flags, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200, 120,
                   "sanctum-proxy to answer /healthz", every=0.5, ignoring=(httpx.HTTPError,))
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        answer = client.chat.completions.create(
            model="smollm2",
            messages=ASK,
            tools=[WEATHER],  # type: ignore[list-item]
            **DETERMINISTIC,
        )
        client.close()
        call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert call.function.name == "get_weather" and orjson.loads(call.function.arguments) == {
            "city": "Paris"
        }
        children = _children(proc.pid)
        assert children, "the embedded llama-server runs as the proxy's child"
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 128 + 15  # SIGTERM, after a graceful shutdown
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in children), 10,
               "llama-server to end with the proxy", every=0.2)


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return False
    return True


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found
