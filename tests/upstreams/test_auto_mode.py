"""Auto mode: how upstream errors are judged and remembered per model (modes.py, pure), then through the real
proxy: capability probes, every rejection signature, parse failures, quirks."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair.upstream_errors import classify
from sanctum_proxy.upstreams.auto_mode import ModeBook
from sanctum_proxy.upstreams.capabilities import UNKNOWN, Capabilities, CapabilityBook, from_props, from_show
from tests.fakes.upstream import Step, asked, checked, completion, native_call
from tests.polling import wait_until
from tests.tools import WEATHER_DESCRIBED as WEATHER

TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
HERMES_ANSWER = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
# Real /props of llama-server 11434 on SmolLM2-135M (tests/e2e pins it), trimmed to what the probe reads.
SMOLLM2_PROPS = {
    "chat_template_caps": {
        "supports_tools": False,
        "supports_tool_calls": False,
        "supports_system_role": True,
        "supports_parallel_tool_calls": False,
    }
}
QWEN_PROPS = {"chat_template_caps": {"supports_tools": True, "supports_tool_calls": True}}



def test_real_rejection_bodies_mean_tools_unsupported():
    for status, message in [
        (500, "tools param requires --jinja flag"),
        (500, "tool_choice param requires --jinja flag"),
        (400, "registry.ollama.ai/library/gemma:2b does not support tools"),
        (400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),
        (500, "Unsupported param: tools"),
        (422, "This model does not support function calling"),
    ]:
        assert classify(UpstreamError(status, message)) == "tools_unsupported", message


def test_llama_cpp_parse_failures_are_recognised():
    for message in ["The model produced output that does not match the expected peg-native format",
                    "Failed to parse input at pos 184: <tool_call>", "Invalid diff: now finding less tool calls!"]:
        assert classify(UpstreamError(500, message)) == "upstream_parse_failure"


def test_unrelated_errors_never_flip():
    for status, message in [(500, "server overloaded, try later"), (503, "Loading model"),
                            (400, "the request exceeds the available context size"), (404, "model not found")]:
        assert classify(UpstreamError(status, message)) is None


def test_decisions_are_per_model_and_parse_failures_flip_after_threshold():
    book = ModeBook(parse_failure_threshold=2)
    book.settle("u", "a", "prompted", "tools_rejected")
    assert book.get("u", "a").mode == "prompted" and book.get("u", "b") is None
    assert book.parse_failure("u", "b") is False
    assert book.parse_failure("u", "b") is True  # the threshold: the proxy's own request decides the flip
    assert book.get("u", "b").mode == "native"


def test_recheck_forgets_a_prompted_decision():
    now = [100.0]
    book = ModeBook(recheck_seconds=10, clock=lambda: now[0])
    book.settle("u", "a", "prompted", "tools_rejected")
    now[0] = 200.0
    assert book.get("u", "a") is None


def post(client: httpx.Client, body=ASK, **headers):
    return client.post("/v1/chat/completions", json=body, headers=headers)


def test_probe_readers_take_only_what_the_upstream_said():
    assert from_props(SMOLLM2_PROPS).tools is False
    assert from_props(QWEN_PROPS).tools is True
    assert (
        from_props({"chat_template_caps": {"supports_tools": True, "supports_tool_calls": False}}).tools
        is False
    )
    assert from_props({"model_path": "x.gguf"}) is None and from_props("File Not Found") is None
    assert from_show({"capabilities": ["completion", "tools"]}).tools is True
    assert from_show({"capabilities": ["completion"]}).tools is False
    assert from_show({"template": "..."}) is None


def test_llama_cpp_template_without_tool_support_never_sees_tools(make_proxy, fake):
    with httpx.Client(base_url=make_proxy(probe_timeout=30), timeout=60) as client:  # CI boxes are slow
        check_probe_settles_prompted(client, fake)


def check_probe_settles_prompted(client, fake):
    fake[0].props = SMOLLM2_PROPS
    fake[0].push(Step(body=completion(HERMES_ANSWER)), Step(body=completion("Sunny.")))
    r = post(client)
    assert r.status_code == 200 and r.headers["x-sanctum-spell-calling"] == "prompted"
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    omen = r.json()["sanctum"]["omens"][0]
    assert omen["type"] == "SpellCallingFallback" and omen["reason"] == "capability_probe"
    assert "supports_tool_calls=False" in omen["message"]
    assert post(client).json()["sanctum"]["omens"] == []  # later requests go prompted quietly
    assert all("tools" not in body for body in fake[0].requests)
    assert fake[0].probes == ["props"]  # probed once per model
    status = client.get("/sanctum/status").json()
    assert status["modes"][0]["reason"] == "capability_probe"
    assert status["capabilities"][0]["server"] == "llama.cpp"


def test_ollama_model_without_tools_capability_goes_prompted(client, fake):
    fake[0].show = {"capabilities": ["completion"]}
    fake[0].push(Step(body=completion("Sunny.")))
    r = post(client)
    assert r.headers["x-sanctum-spell-calling"] == "prompted" and "tools" not in fake[0].requests[0]
    assert fake[0].probes == ["props", "show:m"]


def test_capable_template_keeps_native_mode(client, fake):
    fake[0].props = QWEN_PROPS
    fake[0].push(Step(body=completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls")))
    r = post(client)
    assert r.headers["x-sanctum-spell-calling"] == "native" and fake[0].requests[0]["tools"] == [WEATHER]
    assert r.json()["sanctum"]["omens"] == []


def test_no_probe_without_tools_or_outside_auto_mode(client, fake):
    post(client, {"model": "m", "messages": ASK["messages"]})
    post(client, ASK, **{"x-sanctum-spell-calling": "native", "x-sanctum-constrain": "off"})
    assert fake[0].probes == []


def test_native_mode_probes_when_a_correction_round_may_be_constrained(client, fake):
    """Whether tool_choice "required" can hold a native correction round is the template's to say (issue 31):
    asked once per model, whether or not a correction comes."""
    fake[0].props = SMOLLM2_PROPS
    for _ in range(2):
        r = post(client, ASK, **{"x-sanctum-spell-calling": "native"})
        assert r.headers["x-sanctum-spell-calling"] == "native"
    assert fake[0].probes == ["props"] and all(body["tools"] for body in fake[0].requests)


def test_probe_that_is_disabled_is_not_sent(make_proxy, fake):
    fake[0].props = SMOLLM2_PROPS
    with httpx.Client(base_url=make_proxy(probe_capabilities=False), timeout=10) as c:
        assert post(c).headers["x-sanctum-spell-calling"] == "native"
    assert fake[0].probes == []


async def test_concurrent_first_requests_share_one_probe():
    book, calls = CapabilityBook(), []

    async def ask() -> Capabilities:
        calls.append(1)
        await asyncio.sleep(0.05)
        return Capabilities(tools=False, json_schema=True, server="llama.cpp", source="test")

    results = await asyncio.gather(*(book.get("u", "m", ask) for _ in range(10)))
    assert len(calls) == 1 and {r.tools for r in results} == {False}


async def test_failed_probe_is_unknown_and_asked_again_later():
    now = [0.0]
    book = CapabilityBook(unknown_ttl=60, clock=lambda: now[0])

    async def broken() -> Capabilities:
        raise RuntimeError("boom")

    assert await book.get("u", "m", broken) == UNKNOWN
    assert book.cached("u", "m") == UNKNOWN
    now[0] = 61
    assert book.cached("u", "m") is None


VLLM_NO_AUTO = (
    400,
    {
        "object": "error",
        "type": "BadRequestError",
        "code": 400,
        "param": None,
        "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    },
)
GENERIC = (422, {"error": {"message": "This model does not support function calling."}})
LLAMA_TOOL_CHOICE = (
    500,
    {"error": {"code": 500, "message": "tool_choice param requires --jinja flag", "type": "server_error"}},
)


@pytest.mark.parametrize(
    "rejection", [VLLM_NO_AUTO, GENERIC, LLAMA_TOOL_CHOICE], ids=["vllm", "generic", "tc"]
)
def test_every_rejection_signature_is_answered_prompted_on_the_first_try(client, fake, rejection):
    refused = Step(status=rejection[0], body=rejection[1])
    fake[0].push(refused, Step(body=completion(HERMES_ANSWER)))
    fake[0].checks.append(refused)  # the proxy's own check, beside the prompted round
    r = post(client)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "tool_calls"
    omen = r.json()["sanctum"]["omens"][0]
    assert omen["reason"] == "tools_rejected" and omen["upstream_status"] == rejection[0]
    native, prompted = asked(fake[0].requests)
    assert "tools" in native and "tools" not in prompted
    wait_until(lambda: client.get("/sanctum/status").json()["modes"], 5, "the flip the check confirms")
    (check,) = checked(fake[0].requests)
    assert check["tools"][0]["function"]["name"] == "sanctum_check"


PARSE_FAILURE = (
    500,
    {
        "error": {
            "code": 500,
            "type": "server_error",
            "message": "The model produced output that does not match the expected Hermes 2 Pro format",
        }
    },
)


def test_upstream_parse_failure_is_answered_prompted_and_flips_after_the_threshold(make_proxy, fake):
    with httpx.Client(base_url=make_proxy(parse_failure_threshold=2), timeout=10) as c:
        failed = Step(status=PARSE_FAILURE[0], body=PARSE_FAILURE[1])
        fake[0].checks.append(failed)  # at the threshold the proxy's own request fails too
        for _ in range(2):
            fake[0].push(failed, Step(body=completion(HERMES_ANSWER)))
            r = post(c)
            assert (
                r.status_code == 200 and r.json()["sanctum"]["omens"][0]["reason"] == "upstream_parse_failure"
            )
        wait_until(lambda: c.get("/sanctum/status").json()["modes"], 5, "the flip the check confirms")
        fake[0].push(Step(body=completion("Sunny.")))
        assert post(c).headers["x-sanctum-spell-calling"] == "prompted"
    assert "tools" not in fake[0].requests[-1]


def test_upstream_parse_failure_in_native_mode_is_an_upstream_error(client, fake):
    fake[0].push(Step(status=PARSE_FAILURE[0], body=PARSE_FAILURE[1]))
    r = post(client, ASK, **{"x-sanctum-spell-calling": "native"})
    assert r.status_code == 500 and r.json()["error"]["type"] == "upstream_error"
    assert "expected Hermes 2 Pro format" in r.json()["error"]["message"]


def test_ollama_empty_answer_to_a_tools_request_is_asked_again_prompted(client, fake):
    fake[0].push(Step(body=completion("")), Step(body=completion(HERMES_ANSWER)))
    r = post(client)
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    assert r.json()["sanctum"]["omens"][0]["reason"] == "upstream_parse_failure"


def test_named_tool_choice_is_sent_as_that_tool_alone_with_required(client, fake):
    body = {
        **ASK,
        "tools": [WEATHER, TIME],
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
    }
    fake[0].push(Step(body=completion(None, [native_call("get_time", "{}")], "tool_calls")))
    post(client, body, **{"x-sanctum-spell-calling": "native"})
    sent = fake[0].requests[0]
    assert sent["tool_choice"] == "required" and [t["function"]["name"] for t in sent["tools"]] == [
        "get_time"
    ]


def test_relayed_history_calls_get_type_and_arguments(client, fake):
    history = [
        *ASK["messages"],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "get_weather"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    ]
    post(client, {**ASK, "messages": history}, **{"x-sanctum-spell-calling": "native"})
    relayed = fake[0].requests[0]["messages"][1]["tool_calls"][0]
    assert relayed["type"] == "function" and relayed["function"]["arguments"] == "{}"


def test_parallel_tool_calls_false_is_enforced_for_an_upstream_that_ignores_it(client, fake):
    calls = [
        native_call("get_weather", '{"city":"Paris"}', "a"),
        native_call("get_weather", '{"city":"Rome"}', "b"),
    ]
    fake[0].push(Step(body=completion(None, calls, "tool_calls")))
    r = post(client, {**ASK, "parallel_tool_calls": False})
    assert [c["id"] for c in r.json()["choices"][0]["message"]["tool_calls"]] == ["a"]


def test_prompted_multi_turn_history_reaches_the_upstream_as_text(client, fake):
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "error: city service down"},
    ]
    fake[0].push(Step(body=completion("Paris is 18C; Rome is unknown.")))
    r = post(client, {**ASK, "messages": history}, **{"x-sanctum-spell-calling": "prompted"})
    assert r.json()["choices"][0]["message"]["content"] == "Paris is 18C; Rome is unknown."
    sent = fake[0].requests[0]
    assert not {"tools", "tool_choice"} & set(sent)
    assert all(
        m["role"] in ("system", "user", "assistant") and "tool_calls" not in m for m in sent["messages"]
    )
    assert sent["messages"][0]["content"].startswith("Be brief.\n\n# Tools")
    assert (
        'id="c2"' in sent["messages"][5]["content"] and "city service down" in sent["messages"][5]["content"]
    )


def test_prompted_calls_get_fresh_unique_ids(client, fake):
    two = HERMES_ANSWER + "\n" + HERMES_ANSWER.replace("Paris", "Rome")
    fake[0].push(Step(body=completion(two)))
    r = post(client, ASK, **{"x-sanctum-spell-calling": "prompted"})
    ids = [c["id"] for c in r.json()["choices"][0]["message"]["tool_calls"]]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


def test_prompt_format_is_chosen_per_model(make_proxy, fake):
    with httpx.Client(base_url=make_proxy(prompt_formats={"phi*": "json"}), timeout=10) as c:
        for model in ("phi-3-mini", "qwen2.5"):
            fake[0].push(Step(body=completion("Sunny.")))
            post(c, {**ASK, "model": model}, **{"x-sanctum-spell-calling": "prompted"})
    phi, qwen = (r["messages"][0]["content"] for r in fake[0].requests)
    assert "```json" in phi and "<tool_call>" not in phi
    assert "<tool_call>" in qwen and "```json" not in qwen


def test_a_rewritten_capability_row_is_read_afresh():
    book = CapabilityBook()
    book.remember("u", "m", Capabilities(tools=True, json_schema=True, server="llama.cpp", source="probe"))
    first = book.cached("u", "m")
    assert first is not None and first.tool_choice is None
    assert book.cached("u", "m") is first  # the same row: read once
    book.refuse_tool_choice("u", "m")
    again = book.cached("u", "m")
    assert again is not None and again.tool_choice is False and again.tools is True
