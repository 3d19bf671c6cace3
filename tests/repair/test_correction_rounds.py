"""Correction rounds carry the transcript at the cost of only the new tokens (docs/contract.md section 5).

Through the real proxy and the recording fake upstream: a correction round's messages are the first round's
messages byte for byte plus the rejected answer and the correction, its tools (native) or its format section
(prompted) unchanged, and its decoding constrained by what keeps that prefix: tool_choice "required" (native),
a GBNF grammar in the round's own format (llama.cpp, known by its /props), or the answer schema elsewhere.
`correction_context = "fresh"` brings back the JSON-prompt round without the transcript."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.repair.round_body import CONSTRAINED_INSTEAD
from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call
from tests.polling import wait_until
from tests.stream_rules import read_stream

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
HISTORY = [{"role": "system", "content": "You are a helpful assistant."},
           {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
           {"role": "user", "content": "Weather in Paris for 2 days?"}]
ASK = {"model": "m", "messages": HISTORY, "tools": TOOLS}
LLAMA_PROPS = {"chat_template_caps": {"supports_tools": True, "supports_tool_calls": True}}
BAD_ARGS, GOOD_ARGS = '{"days": 2}', '{"city": "Paris", "days": 2}'


def bad_then_good(mode: str, stream: bool) -> list[Step]:
    if mode == "native":
        if stream:
            return [Step(chunks=llama_tool_chunks("get_weather", BAD_ARGS)),
                    Step(chunks=llama_tool_chunks("get_weather", GOOD_ARGS))]
        return [Step(body=completion(None, [native_call("get_weather", BAD_ARGS)], "tool_calls")),
                Step(body=completion(None, [native_call("get_weather", GOOD_ARGS)], "tool_calls"))]
    bad = f'<tool_call>{{"name": "get_weather", "arguments": {BAD_ARGS}}}</tool_call>'
    good = f'<tool_call>{{"name": "get_weather", "arguments": {GOOD_ARGS}}}</tool_call>'
    if stream:
        return [Step(chunks=content_chunks(bad)), Step(chunks=content_chunks(good))]
    return [Step(body=completion(bad)), Step(body=completion(good))]


def ask(client: httpx.Client, mode: str, stream: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The answer's tool call and omens, streamed or not."""
    body = {**ASK, "stream": stream, "sanctum": {"spell_calling": mode}}
    if not stream:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["tool_calls"][0], r.json()["sanctum"]["omens"]
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        got = read_stream(r.read())
    return {"function": {"name": got.calls[0]["name"], "arguments": got.calls[0]["arguments"]}}, got.omens


def assert_prefix_kept(first: dict[str, Any], second: dict[str, Any]) -> None:
    """The second round's messages are the first round's, byte for byte, plus two new turns."""
    before = first["messages"]
    assert orjson.dumps(second["messages"][:len(before)]) == orjson.dumps(before)
    new = second["messages"][len(before):]
    assert [m["role"] for m in new] == ["assistant", "user"]
    assert "get_weather" in new[0]["content"] and '"days"' in new[0]["content"]  # the rejected answer
    assert "city" in new[1]["content"]  # the correction names what to fix


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_native_correction_keeps_the_tools_and_asks_for_the_call_with_tool_choice(client, fake, stream):
    fake[0].props = LLAMA_PROPS  # the probe (auto mode) says the template takes tools: native, held by tool_choice
    fake[0].push(*bad_then_good("native", stream))
    call, omens = ask(client, "auto", stream)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert_prefix_kept(first, second)
    assert second["tools"] == first["tools"] == TOOLS and second["tool_choice"] == "required"
    assert "tool_choice" not in first and "response_format" not in second and "grammar" not in second
    assert omens[0]["type"] == "SpellCallRejected" and omens[0]["correction"] == second["messages"][-1]["content"]


# An upstream that says nothing of its template (vLLM, LM Studio: 404 on /props and /api/show): every correction
# round is the first round's body plus the rejected answer and the correction, with tool_choice "required".
UNIT_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search_web", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
NO_PROBE_TOOLS = [UNIT_WEATHER, TIME, SEARCH]
# case: (the call's name, its arguments, finish_reason, what the rejected answer quotes, what the correction says)
BAD_CALLS = {
    "missing argument": ("get_weather", '{"days": 2}', "tool_calls", '"days":2', "missing required argument 'city'"),
    "unknown name": ("get_wether", '{"city": "Paris"}', "tool_calls", "get_wether",
                     "There is no tool named 'get_wether'"),
    "unexpected argument": ("get_weather", '{"city": "Paris", "town": "Paris"}', "tool_calls", '"town"',
                            "unexpected argument 'town'"),
    "enum violated": ("get_weather", '{"city": "Paris", "unit": "kelvin"}', "tool_calls", '"kelvin"',
                      "'kelvin' is not one of ['celsius', 'fahrenheit']"),
    "truncated value": ("get_weather", '{"city": "Par', "length", '{"city": "Par', "cut off"),
    "garbage": ("get_weather", "Paris weather please", "tool_calls", "Paris weather please", "not valid JSON"),
}


def bad_call(name: str, arguments: str, finish: str, stream: bool) -> Step:
    if not stream:
        return Step(body=completion(None, [native_call(name, arguments)], finish))
    chunks = llama_tool_chunks(name, arguments)
    chunks[-1]["choices"][0]["finish_reason"] = finish
    return Step(chunks=chunks)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_on_an_upstream_that_answers_no_probe_the_correction_round_carries_the_answer_and_the_correction(
        client, fake, case, stream):
    name, arguments, finish, quoted, said = BAD_CALLS[case]
    good = '{"city": "Paris", "unit": "celsius"}'
    fake[0].push(bad_call(name, arguments, finish, stream),
                 Step(chunks=llama_tool_chunks("get_weather", good)) if stream
                 else Step(body=completion(None, [native_call("get_weather", good)], "tool_calls")))
    body = {**ASK, "tools": NO_PROBE_TOOLS, "tool_choice": "required", "stream": stream}
    if stream:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            got = read_stream(r.read())
        calls, omens = [(c["name"], c["arguments"]) for c in got.calls], got.omens
    else:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
        omens = r.json()["sanctum"]["omens"]
    assert [(n, orjson.loads(a)) for n, a in calls] == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    assert fake[0].probes == ["props", "show:m"]  # asked, and neither answered
    first, second = fake[0].requests
    before = first["messages"]
    assert orjson.dumps(second["messages"][:len(before)]) == orjson.dumps(before)
    rejected, correction = second["messages"][len(before):]
    assert rejected["role"] == "assistant" and quoted in rejected["content"] and name in rejected["content"]
    assert correction["role"] == "user" and said in correction["content"]
    assert second["tools"] == first["tools"] == NO_PROBE_TOOLS and second["tool_choice"] == "required"
    assert "response_format" not in second and "grammar" not in second
    rejections = [o for o in omens if o["type"] == "SpellCallRejected"]
    assert rejections and all(o["correction"] == correction["content"] for o in rejections)  # what was sent


def test_a_refused_tool_choice_is_remembered_and_later_corrections_go_without_it(client, fake):
    """Remembered once the proxy's own request with tool_choice "required" is refused too."""
    missing = Step(body=completion(None, [native_call("get_weather", BAD_ARGS)], "tool_calls"))
    good = Step(body=completion(None, [native_call("get_weather", GOOD_ARGS)], "tool_calls"))
    refusal = Step(status=400, body={"object": "error", "message": 'tool_choice = "required" is not supported!',
                                     "type": "BadRequestError", "param": None, "code": 400})  # vLLM < 0.8
    fake[0].responder = lambda body: refusal if body.get("tool_choice") == "required" else \
        good if len(body["messages"]) > len(HISTORY) else missing
    call, _ = ask(client, "native", False)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    wait_until(lambda: [row["tool_choice"] for row in client.get("/sanctum/status").json()["capabilities"]]
               == [False], 5, "the refusal remembered")
    call, _ = ask(client, "native", False)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, refused, retried, again, corrected = [b for b in fake[0].requests if "sanctum_check" not in str(b)]
    assert refused["tool_choice"] == "required" and "tool_choice" not in retried
    assert retried["messages"] == refused["messages"] and len(retried["messages"]) == len(first["messages"]) + 2
    assert "tool_choice" not in corrected and len(corrected["messages"]) == len(again["messages"]) + 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_prompted_correction_on_llama_cpp_keeps_the_format_section_and_adds_a_grammar(client, fake, stream):
    fake[0].props = LLAMA_PROPS  # the probe says llama.cpp: it takes a GBNF grammar
    fake[0].push(*bad_then_good("prompted", stream))
    call, omens = ask(client, "prompted", stream)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert_prefix_kept(first, second)
    assert "tools" not in second and "response_format" not in second and "grammar" not in first
    grammar = second["grammar"]  # pinned to the tool the correction is about, in the Hermes format
    assert "get_weather" in grammar and "get_time" not in grammar and "<tool_call>" in grammar
    assert omens[0]["correction"] == second["messages"][-1]["content"]


def test_prompted_correction_elsewhere_keeps_the_prompt_and_adds_the_answer_schema(client, fake):
    answer = orjson.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}).decode()
    fake[0].push(bad_then_good("prompted", False)[0], Step(body=completion(answer)))
    call, omens = ask(client, "prompted", False)  # no /props: not known to be llama.cpp
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert_prefix_kept(first, second)
    assert "grammar" not in second and second["response_format"]["type"] == "json_schema"
    assert omens[0]["correction"] == second["messages"][-1]["content"]


@pytest.mark.parametrize("mode", ["native", "prompted"])
def test_fresh_context_restores_the_json_prompt_round_without_the_transcript(make_proxy, fake, mode):
    fake[0].props = LLAMA_PROPS
    answer = orjson.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}).decode()
    fake[0].push(bad_then_good(mode, False)[0], Step(body=completion(answer)))
    with httpx.Client(base_url=make_proxy(correction_context="fresh"), timeout=20) as client:
        call, omens = ask(client, mode, False)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert "tools" not in second and "grammar" not in second and second["response_format"]["type"] == "json_schema"
    assert second["messages"][0]["content"] != first["messages"][0]["content"]  # the rewritten format section
    assert [m["content"] for m in second["messages"][1:]] == [m["content"] for m in HISTORY[1:]]
    assert omens[0]["correction"] == CONSTRAINED_INSTEAD  # never a text the model did not read


NO_TOOLS_PROPS = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}  # SmolLM2's


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_native_correction_where_the_template_drops_the_tools_goes_prompted_with_the_transcript(
        client, fake, stream):
    """llama.cpp --jinja renders no tools for such a template and ignores tool_choice (measured on SmolLM2): the
    correction round is the request prompted, held by a grammar, with the rejected answer and the correction."""
    fake[0].props = NO_TOOLS_PROPS
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    prose = "Paris is lovely in spring."
    fake[0].push(Step(chunks=content_chunks(prose)) if stream else Step(body=completion(prose)),
                 Step(chunks=content_chunks(call)) if stream else Step(body=completion(call)))
    got, omens = ask_required(client, stream)
    assert got == ("get_weather", {"city": "Paris", "days": 2})
    first, second = fake[0].requests
    assert first["tools"] == TOOLS and first["tool_choice"] == "required"
    assert "tools" not in second and "tool_choice" not in second and "<tool_call>" in second["grammar"]
    assert "<tool_call>" in second["messages"][0]["content"]  # the format section of the prompted round
    rejected, correction = second["messages"][-2:]
    assert rejected == {"role": "assistant", "content": prose} and "A tool call is required" in correction["content"]
    assert omens[0]["correction"] == correction["content"]
    assert not [o for o in omens if o["type"] == "SpellCallRepaired"]  # the call is in the format it was asked in


def ask_required(client: httpx.Client, stream: bool) -> tuple[tuple[str, Any], list[dict[str, Any]]]:
    body = {**ASK, "tool_choice": "required", "stream": stream, "sanctum": {"spell_calling": "native"}}
    if stream:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            got = read_stream(r.read())
        return (got.calls[0]["name"], orjson.loads(got.calls[0]["arguments"])), got.omens
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    return (call["name"], orjson.loads(call["arguments"])), r.json()["sanctum"]["omens"]


# --- a correction round longer than the upstream's context -------------------------------------------------------

def llama_context_error(prompt: int, ctx: int) -> Step:
    """llama-server's answer to a prompt longer than its context (tools/server/server-context.cpp: 400,
    type exceed_context_size_error, with n_prompt_tokens and n_ctx), as CI met it on SmolLM2's Paris case."""
    return Step(status=400, body={"error": {
        "code": 400, "message": f"request ({prompt} tokens) exceeds the available context size ({ctx} tokens), "
                                "try increasing it", "type": "exceed_context_size_error",
        "n_prompt_tokens": prompt, "n_ctx": ctx}})


RAMBLING = "Paris is a city of light. " * 200  # a long prose answer: with its correction the round overflows


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_correction_too_long_for_the_context_is_sent_again_fresh(client, fake, stream):
    """The client's request fit; the correction (the first round's prompt, the long rejected answer, the
    correction) did not: the round goes again once as the fresh correction (JSON prompt, answer schema, no
    transcript) instead of the upstream's 400 reaching the client."""
    fake[0].props = LLAMA_PROPS
    answer = orjson.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}).decode()
    first = Step(chunks=content_chunks(RAMBLING, size=64)) if stream else Step(body=completion(RAMBLING))
    last = Step(chunks=content_chunks(answer)) if stream else Step(body=completion(answer))
    fake[0].push(first, llama_context_error(2132, 2048), last)
    body = {**ASK, "stream": stream, "tool_choice": "required", "sanctum": {"spell_calling": "prompted"}}
    if stream:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            got = read_stream(r.read())
        assert got.error is None and got.calls, got.error
        calls = [(c["name"], orjson.loads(c["arguments"])) for c in got.calls]
    else:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        calls = [(c["function"]["name"], orjson.loads(c["function"]["arguments"]))
                 for c in r.json()["choices"][0]["message"]["tool_calls"]]
    assert calls == [("get_weather", {"city": "Paris", "days": 2})]
    sent, overflowed, fresh = fake[0].requests
    assert "grammar" in overflowed and overflowed["messages"][-2]["content"] == RAMBLING
    assert "grammar" not in fresh and fresh["response_format"]["type"] == "json_schema"
    assert len(fresh["messages"]) == len(sent["messages"])  # no transcript: the rejected answer is not resent


def test_a_correction_too_long_without_constraining_surrenders_as_configured(make_proxy, fake):
    fake[0].props = LLAMA_PROPS
    fake[0].push(Step(body=completion(RAMBLING)), llama_context_error(2132, 2048))
    body = {**ASK, "tool_choice": "required", "sanctum": {"spell_calling": "prompted"}}
    with httpx.Client(base_url=make_proxy(constrain="off"), timeout=20) as client:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 422, r.text
    assert "exceeded the upstream's context" in r.json()["error"]["message"]
    assert len(fake[0].requests) == 2  # no third round: a fresh one needs constraining
    with httpx.Client(base_url=make_proxy(constrain="off", on_surrender="content"), timeout=20) as client:
        fake[0].push(Step(body=completion(RAMBLING)), llama_context_error(2132, 2048))
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == RAMBLING


@pytest.mark.parametrize(("status", "body", "exceeded"), [
    (400, {"error": {"code": 400, "message": "request (5000 tokens) exceeds the available context size (4096 "
                     "tokens), try increasing it", "type": "exceed_context_size_error"}}, True),  # llama.cpp
    (400, {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, your "
           "request has 5000 input tokens. Please reduce the length of the input messages.",
           "type": "BadRequestError", "param": None, "code": 400}, True),  # vLLM serving_engine
    (400, {"error": "the input length exceeds the context length"}, True),  # Ollama (truncate off)
    (400, {"error": {"message": "Unsupported param: tools", "type": "invalid_request_error"}}, False),
    (200, {}, False),
])
def test_context_exceeded_reads_each_upstreams_own_words(status, body, exceeded):
    from sanctum_proxy.errors import UpstreamError
    from sanctum_proxy.repair.upstream_errors import context_exceeded
    message = body.get("message") or (body["error"] if isinstance(body.get("error"), str)
                                       else body.get("error", {}).get("message", ""))
    assert context_exceeded(UpstreamError(status, message, body), {"messages": []}) is exceeded


def test_a_context_phrase_written_by_the_client_is_not_the_upstreams_verdict():
    from sanctum_proxy.errors import UpstreamError
    from sanctum_proxy.repair.upstream_errors import context_exceeded
    said = "maximum context length is 12 tokens"
    error = UpstreamError(400, f"invalid value in messages[0].content: '{said}'", {"error": {"message": "x"}})
    assert not context_exceeded(error, {"messages": [{"role": "user", "content": said}]})
