"""Each repair tier, auto mode and streaming through the real proxy, counting upstream rounds."""

from __future__ import annotations

import httpx
import openai
import orjson

from tests.fakes.upstream import (
    LLAMA_NO_JINJA,
    OLLAMA_NO_TOOLS,
    Step,
    asked,
    completion,
    content_chunks,
    llama_tool_chunks,
    native_call,
)
from tests.polling import wait_until

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}, "required": ["city"]}}}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
GOOD_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def post(client: httpx.Client, body=ASK, **headers):
    return client.post("/v1/chat/completions", json=body, headers=headers)


def test_valid_native_call_comes_back_byte_identical_without_omens(client, fake):
    args = '{"city":  "Paris"}'
    fake[0].push(Step(body=completion(None, [native_call("get_weather", args, "call_keep")], "tool_calls")))
    r = post(client)
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["id"] == "call_keep" and call["function"]["arguments"] == args
    assert r.json()["sanctum"]["omens"] == [] and r.headers["x-sanctum-rounds"] == "1"
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"


def test_malformed_json_is_mended_locally_in_one_round(client, fake):
    fake[0].push(Step(body=completion(None, [native_call("get_weather", "{'city': 'Paris',}")], "tool_calls")))
    r = post(client)
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert r.headers["x-sanctum-rounds"] == "1" and "SpellCallRepaired=1" in r.headers["x-sanctum-omens"]
    assert len(fake[0].requests) == 1


def test_call_written_into_content_becomes_tool_calls(client, fake):
    fake[0].push(Step(body=completion(GOOD_CALL)))
    msg = post(client).json()["choices"][0]["message"]
    assert msg["tool_calls"][0]["function"]["name"] == "get_weather" and not (msg["content"] or "").strip()


def test_unknown_tool_gets_a_correction_round_listing_the_tools(client, fake):
    fake[0].push(Step(body=completion(None, [native_call("lookup_weather", '{"city":"Paris"}')], "tool_calls")),
                 Step(body=completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls")))
    r = post(client, {**ASK, "sanctum": {"constrain": "off"}})  # the conversational tier alone (no grammar)
    assert r.status_code == 200 and r.headers["x-sanctum-rounds"] == "2"
    omen = r.json()["sanctum"]["omens"][0]
    assert omen["type"] == "SpellCallRejected" and omen["reason"] == "unknown_spell"
    second = fake[0].requests[1]["messages"]  # the rejected call quoted in the prompt format (Hermes)
    assert second[-2]["role"] == "assistant" and second[-2]["content"].startswith("<tool_call>\n")
    assert "lookup_weather" in second[-2]["content"]
    assert second[-1]["role"] == "user" and "get_weather" in second[-1]["content"]
    assert r.json()["usage"]["total_tokens"] == 30


def test_surrender_after_max_rounds_is_422_with_every_rejected_answer(client, fake):
    for city in ("A", "B", "C"):
        fake[0].push(Step(body=completion(None, [native_call("nope", f'{{"city":"{city}"}}')], "tool_calls")))
    r = post(client)
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["type"] == "spell_call_parse_error" and err["rounds"] == 3 and len(err["rejected"]) == 3
    assert len(fake[0].requests) == 3
    trace = client.get(f"/sanctum/traces/{r.headers['x-sanctum-trace-id']}").json()  # a failed request's too
    assert trace["outcome"] == "surrendered" and trace["status"] == 422 and len(trace["rounds"]) == 3
    # What the model sent (issue 20): the native call's JSON as it came, never re-rendered as <tool_call> text.
    assert [orjson.loads(r)["function"] for r in err["rejected"]] == [
        {"name": "nope", "arguments": f'{{"city":"{city}"}}'} for city in "ABC"]


def test_repeating_a_rejected_call_verbatim_gives_up_early(client, fake):
    for _ in range(2):
        fake[0].push(Step(body=completion(None, [native_call("nope", '{"city":"A"}')], "tool_calls")))
    r = post(client)
    assert r.status_code == 422 and "repeated" in r.json()["error"]["message"]
    assert len(fake[0].requests) == 2


def test_on_surrender_content_returns_the_last_raw_answer(make_proxy, fake):
    url = make_proxy(on_surrender="content", max_repair_rounds=0)
    fake[0].push(Step(body=completion(None, [native_call("nope", '{"city":"A"}')], "tool_calls")))
    r = httpx.post(url + "/v1/chat/completions", json=ASK)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "stop"
    assert "nope" in r.json()["choices"][0]["message"]["content"]


def test_auto_mode_flips_on_llama_cpp_rejection_and_remembers(client, fake):
    refused = Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1])
    fake[0].push(refused, Step(body=completion(GOOD_CALL)))
    fake[0].checks.append(refused)  # the proxy's own check, beside the prompted round
    r = post(client)
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert r.json()["sanctum"]["omens"][0]["type"] == "SpellCallingFallback"
    assert r.headers["x-sanctum-spell-calling"] == "prompted"
    prompted = asked(fake[0].requests)[1]
    assert "tools" not in prompted and "<tool_call>" in prompted["messages"][0]["content"]
    wait_until(lambda: client.get("/sanctum/status").json()["modes"], 5, "the flip the check confirms")
    assert client.get("/sanctum/status").json()["modes"][0]["mode"] == "prompted"
    fake[0].push(Step(body=completion("Sunny.")))
    post(client)
    assert len(fake[0].requests) == 4 and "tools" not in fake[0].requests[3]


def test_auto_mode_flips_on_ollama_rejection(client, fake):
    fake[0].push(Step(status=OLLAMA_NO_TOOLS[0], body=OLLAMA_NO_TOOLS[1]), Step(body=completion("Sunny.")))
    r = post(client)
    assert r.status_code == 200 and r.json()["sanctum"]["omens"][0]["upstream_status"] == 400


def test_unrelated_500_does_not_flip(client, fake):
    fake[0].push(Step(status=500, body={"error": {"message": "server overloaded"}}))
    assert post(client).status_code == 500
    assert client.get("/sanctum/status").json()["modes"] == []


def test_tool_choice_required_answered_with_prose_is_corrected(client, fake):
    fake[0].push(Step(body=completion("It is sunny.")),
                 Step(body=completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls")))
    r = post(client, {**ASK, "tool_choice": "required"})
    assert r.json()["sanctum"]["omens"][0]["reason"] == "missing_call"
    assert r.headers["x-sanctum-rounds"] == "2"


def test_stream_of_llama_cpp_tool_deltas_accumulates_in_the_sdk(proxy, fake):
    fake[0].push(Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')))
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x")
    with sdk.chat.completions.stream(model="m", messages=ASK["messages"], tools=[WEATHER]) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and orjson.loads(call.function.arguments) == {"city": "Paris"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_stream_with_call_in_content_sends_no_markup_as_content(proxy, fake):
    text = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    fake[0].push(Step(chunks=content_chunks(text, size=3)))
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x")
    content, names = "", []
    for c in sdk.chat.completions.create(model="m", messages=ASK["messages"], tools=[WEATHER], stream=True):
        for ch in c.choices:
            content += ch.delta.content or ""
            names += [t.function.name for t in ch.delta.tool_calls or [] if t.function and t.function.name]
    assert "<tool_call>" not in content and names == ["get_weather"]


def test_surrender_mid_stream_is_an_error_event(client, fake):
    for _ in range(3):
        fake[0].push(Step(chunks=llama_tool_chunks("nope", f'{{"city": "{_}"}}')))
    with client.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True}) as r:
        body = r.read().decode()
    assert '"spell_call_parse_error"' in body and "[DONE]" not in body


def test_prompted_call_in_the_asked_for_format_is_clean_not_a_repair(client, fake):
    fake[0].push(Step(body=completion(GOOD_CALL)))
    r = post(client, {**ASK, "sanctum": {"spell_calling": "prompted", "constrain": "off"}})
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert r.json()["sanctum"]["omens"] == []
    trace = client.get(f"/sanctum/traces/{r.headers['x-sanctum-trace-id']}").json()
    assert trace["outcome"] == "clean"


def test_prompted_call_in_another_format_is_still_a_repair(client, fake):
    fake[0].push(Step(body=completion('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]')))
    r = post(client, {**ASK, "sanctum": {"spell_calling": "prompted", "constrain": "off"}})
    (omen,) = r.json()["sanctum"]["omens"]
    assert omen["type"] == "SpellCallRepaired" and "mistral_in_content" in omen["repairs"]


def test_prompted_json_format_fenced_call_is_clean(make_proxy, fake):
    url = make_proxy(prompt_format="json", spell_calling="prompted", constrain="off")
    fake[0].push(Step(body=completion('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```')))
    r = httpx.post(url + "/v1/chat/completions", json=ASK)
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert r.json()["sanctum"]["omens"] == []


LOOP = {**ASK, "messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Paris: sunny, 21 C"}]}
# SmolLM2-135M answering the result in a prompted history echoes the wrapper the proxy wrote it in.
ECHO = 'It is sunny.\n<tool_response name="get_weather" id="call_1">\nParis: sunny, 21 C\n</tool_response>'


def test_prompted_answer_loses_the_echoed_result_tags_streamed_or_not(proxy, fake):
    prompted = {"spell_calling": "prompted", "constrain": "off"}
    fake[0].push(Step(body=completion(ECHO)))
    fake[0].push(Step(chunks=content_chunks(ECHO, size=4)))
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x")
    plain = sdk.chat.completions.create(model="m", messages=LOOP["messages"], tools=[WEATHER],
                                        extra_body={"sanctum": prompted})
    streamed = "".join(c.choices[0].delta.content or "" for c in sdk.chat.completions.create(
        model="m", messages=LOOP["messages"], tools=[WEATHER], stream=True, extra_body={"sanctum": prompted})
        if c.choices)
    assert plain.choices[0].message.content == streamed == "It is sunny.\nParis: sunny, 21 C"
    sent = fake[0].requests[-1]["messages"][-1]["content"]
    assert sent.startswith('<tool_response name="get_weather" id="call_1">')  # the tags the model echoed


def test_native_answer_keeps_result_tags_it_was_not_given_by_the_proxy(client, fake):
    fake[0].push(Step(body=completion(ECHO)))
    r = post(client, {**LOOP, "sanctum": {"spell_calling": "native"}})
    assert r.json()["choices"][0]["message"]["content"] == ECHO
