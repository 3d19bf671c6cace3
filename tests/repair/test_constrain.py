"""Constrained tool calling: the answer schema, decoding it back, and constrained rounds through the proxy.

The fake upstream plays a grammar-constrained server: every answer it gives is checked against the schema
the proxy sent, so a test fails if the proxy asks for something the answer could not have been."""

from __future__ import annotations

import httpx
import jsonschema
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sanctum_proxy.cli import resolve
from sanctum_proxy.config import Settings
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.toolbox import Toolbox
from tests.fakes.upstream import Step, completion, content_chunks, native_call
from tests.polling import wait_until

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
TOOLS = [WEATHER, TIME]
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
BOOK = Toolbox.from_tools(TOOLS)
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


def valid(schema: dict, answer: object) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(answer)


def test_answer_schema_allows_text_one_call_or_several():
    schema = cn.answer_schema(BOOK, text=True, parallel=True)
    assert valid(schema, {"content": "Hi"}) and valid(schema, CALL)
    assert valid(schema, {"tool_calls": [CALL, {"name": "get_time", "arguments": {}}]})
    assert not valid(schema, {"name": "get_weather", "arguments": {}})  # the tool's own schema applies
    assert not valid(schema, {"name": "get_wether", "arguments": {"city": "Paris"}})
    assert not valid(schema, {"name": "get_weather", "arguments": {"city": "Paris", "zip": 1}})
    # what validation refuses, the schema does too: a tool without properties takes {} (issue 31)
    assert not valid(schema, {"name": "get_time", "arguments": {"city": "Paris"}})


def test_required_call_drops_the_text_branch_and_no_parallel_drops_the_list():
    schema = cn.answer_schema(BOOK, text=False, parallel=False)
    assert not valid(schema, {"content": "Hi"}) and not valid(schema, {"tool_calls": [CALL]})
    assert valid(schema, CALL)


def test_pinned_tool_schema_accepts_only_that_tool():
    schema = cn.answer_schema(BOOK.restricted_to("get_time"), text=False, parallel=False)
    assert valid(schema, {"name": "get_time", "arguments": {}}) and not valid(schema, CALL)


def test_decode_gives_openai_messages_and_leaves_other_text_alone():
    ids = iter(["call_1", "call_2"])
    message = cn.decode({"role": "assistant", "content": orjson.dumps(CALL).decode()}, lambda: next(ids))
    assert message["content"] is None and message["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        }
    ]
    assert cn.decode({"role": "assistant", "content": '{"content": "Hi"}'})["content"] == "Hi"
    for raw in ("Sunny.", '{"foo": 1}', "[1]", '<tool_call>{"name": "x"}</tool_call>'):
        assert cn.decode({"role": "assistant", "content": raw})["content"] == raw


def test_broken_call_is_a_call_branch_that_is_not_whole_json():
    cut = cn.broken_call({"content": '{"name": "get_\\u00e9", "arguments": {"ci'}, "length")
    assert cut is not None and cut.tool == "get_\u00e9" and cut.details == ("the answer was cut off by max_tokens",)
    several = cn.broken_call({"content": '{"tool_calls": [{"name": "a", "arguments": {}}, ,]}'}, "stop")
    assert several is not None and several.tool is None and several.details == ("the answer is not complete JSON",)
    assert cn.broken_call({"content": orjson.dumps(CALL).decode()}, "stop") is None
    assert cn.broken_call({"content": '{"content": "cut sho'}, "length") is None  # text: its text so far
    assert cn.broken_call({"content": 'Sure, {"name": "x"'}, "length") is None  # not an answer object


@given(st.text(max_size=40), st.integers(min_value=1, max_value=9))
def test_visible_text_grows_to_the_whole_text_for_any_chunking(text, size):
    raw = orjson.dumps({"content": text}).decode()
    shown = ""
    for end in range(size, len(raw) + size, size):
        visible = cn.visible_text(raw[:end])
        assert visible.startswith(shown) or not visible
        shown = visible or shown
    assert shown == text


def test_visible_text_shows_nothing_of_a_call():
    assert cn.visible_text(orjson.dumps(CALL).decode()[:20]) == ""
    assert cn.visible_text('{"tool_calls": [') == ""


# --- through the proxy -----------------------------------------------------------------------------------


def answer_for(fake, answer: object) -> Step:
    """A step whose answer is checked against the schema of the request it answers (checked by the test
    after the fact: the fake records every request)."""
    return Step(body=completion(orjson.dumps(answer).decode()))


def schemas_sent(fake) -> list[dict]:
    return [r["response_format"]["json_schema"]["schema"] for r in fake[0].requests if "response_format" in r]


def post(client: httpx.Client, body=ASK, **controls):
    return client.post("/v1/chat/completions", json={**body, "sanctum": controls} if controls else body)


def test_always_constrains_the_first_prompted_round(client, fake):
    fake[0].push(answer_for(fake, CALL))
    r = post(client, spell_calling="prompted", constrain="always")
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    sent = fake[0].requests[0]
    assert "tools" not in sent and sent["response_format"]["type"] == "json_schema"
    assert valid(schemas_sent(fake)[0], CALL) and valid(schemas_sent(fake)[0], {"content": "x"})
    assert '{"content": "<your answer>"}' in sent["messages"][0]["content"]


def test_text_branch_becomes_plain_content(client, fake):
    fake[0].push(answer_for(fake, {"content": "No tool needed."}))
    r = post(client, spell_calling="prompted", constrain="always")
    message = r.json()["choices"][0]["message"]
    assert message["content"] == "No tool needed." and not message.get("tool_calls")
    assert r.json()["choices"][0]["finish_reason"] == "stop"


@pytest.fixture
def fresh_client(make_proxy):
    with httpx.Client(base_url=make_proxy(correction_context="fresh"), timeout=20) as client:
        yield client


def test_fresh_context_constrains_the_correction_pinned_to_the_tool_without_the_transcript(fresh_client, fake):
    client = fresh_client
    fake[0].push(
        Step(body=completion(None, [native_call("get_weather", '{"days": 2}')], "tool_calls")),
        answer_for(fake, {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}),
    )
    r = post(client, spell_calling="native")
    assert (
        r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        == '{"city":"Paris","days":2}'
    )
    assert "response_format" not in fake[0].requests[0] and fake[0].requests[0]["tools"] == TOOLS
    correction = fake[0].requests[1]
    assert "tools" not in correction and correction["messages"][-1]["role"] == "user"
    # The grammar is the correction: the rejected turn is left out of a constrained round (constrain.transcript).
    assert correction["messages"][0]["role"] == "system" and correction["messages"][1:] == ASK["messages"]
    (schema,) = schemas_sent(fake)
    assert not valid(schema, {"content": "x"}) and not valid(schema, {"name": "get_time", "arguments": {}})
    assert valid(schema, {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})
    assert r.json()["sanctum"]["omens"][0]["reason"] == "missing_arguments"


def test_unknown_tool_correction_offers_every_tool(client, fake):
    fake[0].push(
        Step(body=completion(None, [native_call("weather", '{"city": "Paris"}')], "tool_calls")),
        answer_for(fake, CALL),
    )
    post(client, spell_calling="prompted")
    (schema,) = schemas_sent(fake)
    assert valid(schema, CALL) and valid(schema, {"name": "get_time", "arguments": {}})


def test_named_tool_choice_keeps_only_that_tool(client, fake):
    fake[0].push(answer_for(fake, {"name": "get_time", "arguments": {}}))
    body = {**ASK, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    r = post(client, body, spell_calling="prompted", constrain="always")
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"
    (schema,) = schemas_sent(fake)
    assert not valid(schema, CALL) and not valid(schema, {"content": "x"})


def test_off_sends_no_schema(client, fake):
    fake[0].push(
        Step(body=completion(None, [native_call("get_weather", '{"days": 2}')], "tool_calls")),
        Step(body=completion(None, [native_call("get_weather", '{"city": "Paris"}')], "tool_calls")),
    )
    post(client, spell_calling="native", constrain="off")
    assert schemas_sent(fake) == [] and fake[0].requests[1]["tools"] == TOOLS


def test_clients_own_response_format_is_left_alone(client, fake):
    fmt = {"type": "json_object"}
    fake[0].push(Step(body=completion('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')))
    post(client, {**ASK, "response_format": fmt}, spell_calling="prompted", constrain="always")
    assert fake[0].requests[0]["response_format"] == fmt


def test_upstream_that_refuses_the_schema_is_asked_again_unconstrained_and_remembered(client, fake):
    """Remembered once the proxy's own constrained request is refused too (upstreams/lesson_checks.py)."""
    refusal = {
        "error": {"message": "response_format json_schema is not supported", "type": "invalid_request_error"}
    }
    call = completion('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')
    fake[0].responder = lambda body: Step(status=400, body=refusal) if "response_format" in body else Step(body=call)
    r = post(client, spell_calling="prompted", constrain="always")
    assert (
        r.status_code == 200
        and r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"
    )
    clients = [body for body in fake[0].requests if "sanctum_check" not in str(body)]
    assert "response_format" in clients[0] and "response_format" not in clients[1]
    wait_until(lambda: [row["json_schema"] for row in client.get("/sanctum/status").json()["capabilities"]]
               == [False], 5, "the refusal remembered")
    post(client, spell_calling="prompted", constrain="always")
    assert "response_format" not in fake[0].requests[-1]


def test_upstream_that_ignores_the_schema_is_read_by_the_ordinary_tiers(client, fake):
    fake[0].push(Step(body=completion('Sure. <tool_call>{"name": "get_time", "arguments": {}}</tool_call>')))
    r = post(client, spell_calling="prompted", constrain="always")
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"


def sse_chunks(response: httpx.Response) -> list[dict]:
    return [
        orjson.loads(line[6:])
        for line in response.iter_lines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_streamed_text_branch_arrives_as_content_never_as_json(client, fake, size):
    text = 'It is "sunny"\nin Paris \u00e9t\u00e9 \U0001f600.'
    fake[0].push(Step(chunks=content_chunks(orjson.dumps({"content": text}).decode(), size)))
    body = {**ASK, "stream": True, "sanctum": {"spell_calling": "prompted", "constrain": "always"}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        chunks = sse_chunks(r)
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    assert "".join(p for p in pieces if p) == text
    assert not any(p and "{" in p for p in pieces)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_streamed_call_branch_becomes_tool_call_deltas(client, fake):
    fake[0].push(Step(chunks=content_chunks(orjson.dumps(CALL).decode(), 4)))
    body = {**ASK, "stream": True, "sanctum": {"spell_calling": "prompted", "constrain": "always"}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        chunks = sse_chunks(r)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    assert not any(d.get("content") for d in deltas)
    calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(tc["function"].get("arguments", "") for tc in calls) == '{"city":"Paris"}'


def test_embedded_demo_constrains_always_unless_told_otherwise(tmp_path):
    def settings_from(argv: list[str], env: dict[str, str]) -> Settings:
        return resolve(argv, env)[0]

    assert settings_from(["--embedded"], env={}).constrain == "always"
    assert settings_from([], env={}).constrain == "repair"
    assert settings_from(["--embedded", "--constrain", "off"], env={}).constrain == "off"
    config = tmp_path / "c.toml"
    config.write_text('constrain = "repair"\n')
    assert settings_from(["--embedded", "--config", str(config)], env={}).constrain == "repair"


def test_upstream_is_implicit_only_when_nothing_names_one(tmp_path):
    from sanctum_proxy.cli import resolve

    assert resolve([], env={})[1] is True
    assert resolve(["--upstream", "http://127.0.0.1:8080/v1"], env={})[1] is False
    assert resolve([], env={"SANCTUM_UPSTREAM": "http://127.0.0.1:8080/v1"})[1] is False
    assert resolve(["--embedded"], env={})[1] is False
    config = tmp_path / "c.toml"
    config.write_text('upstream = "http://127.0.0.1:8080/v1"\n')
    assert resolve(["--config", str(config)], env={})[1] is False


# --- answers cut by max_tokens -------------------------------------------------------------------------------


def test_text_branch_cut_by_max_tokens_is_its_text_so_far_not_json(client, fake):
    fake[0].push(Step(body=completion('{"content": "It is sunny in Par', finish_reason="length")))
    r = post(client, spell_calling="prompted", constrain="always")
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "It is sunny in Par" and not choice["message"].get("tool_calls")
    assert choice["finish_reason"] == "length"
    assert len(fake[0].requests) == 1  # a cut reply is the client's max_tokens at work, not a fumbled call


def test_streamed_text_branch_cut_by_max_tokens_ends_with_its_text_and_length(client, fake):
    chunks = content_chunks('{"content": "It is sunny in Par', 3)
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    fake[0].push(Step(chunks=chunks))
    body = {**ASK, "stream": True, "sanctum": {"spell_calling": "prompted", "constrain": "always"}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        got = sse_chunks(r)
    pieces = [c["choices"][0]["delta"].get("content") for c in got if c.get("choices")]
    assert "".join(p for p in pieces if p) == "It is sunny in Par"
    assert got[-1]["choices"][0]["finish_reason"] == "length"


def test_call_branch_cut_where_text_could_win_is_answered_in_text_by_a_round_without_tools(client, fake):
    looping = '{"name": "get_weather", "arguments": {"city": "Paaaaaaaa'
    fake[0].push(Step(body=completion(looping, finish_reason="length")))
    fake[0].push(Step(body=completion("It is sunny in Paris.")))
    r = post(client, spell_calling="prompted", constrain="always")
    message = r.json()["choices"][0]["message"]
    assert message["content"] == "It is sunny in Paris." and not message.get("tool_calls")
    omen = r.json()["sanctum"]["omens"][0]
    assert (omen["reason"], omen["details"]) == ("malformed_json", ["the answer was cut off by max_tokens"])
    assert "response_format" not in fake[0].requests[1] and "tools" not in fake[0].requests[1]


def test_required_call_branch_cut_is_bounced_to_a_round_pinned_to_its_tool(client, fake):
    fake[0].push(Step(body=completion('{"name": "get_weather", "arguments": {"city": "Pa', finish_reason="length")))
    fake[0].push(answer_for(fake, CALL))
    r = post(client, {**ASK, "tool_choice": "required"}, spell_calling="prompted", constrain="always")
    message = r.json()["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    omen = next(o for o in r.json()["sanctum"]["omens"] if o["type"] == "SpellCallRejected")
    assert "cut off by max_tokens" in str(omen)
    pinned = schemas_sent(fake)[1]
    assert valid(pinned, CALL) and not valid(pinned, {"name": "get_time", "arguments": {}})
    assert not valid(pinned, {"content": "x"})


def test_required_call_branch_cut_every_time_surrenders_instead_of_returning_json_as_text(client, fake):
    for _ in range(3):
        fake[0].push(Step(body=completion('{"tool_calls": [{"name": "get_time", "argu', finish_reason="length")))
    r = post(client, {**ASK, "tool_choice": "required"}, spell_calling="prompted", constrain="always")
    assert r.status_code == 422 and r.json()["error"]["code"] == "spell_call_parse_error"


# --- a forced call with made-up arguments ----------------------------------------------------------------------

MADE_UP = {"name": "get_weather", "arguments": {"city": "Springfield", "days": 3}}
SMALL_TALK = {**ASK, "messages": [{"role": "user", "content": "Tell me a joke."}]}


def test_a_call_with_made_up_arguments_is_answered_in_text_by_a_round_without_tools(client, fake):
    fake[0].push(answer_for(fake, MADE_UP))
    fake[0].push(Step(body=completion("Why did the cloud stay home? It was under the weather.")))
    r = post(client, SMALL_TALK, spell_calling="prompted", constrain="always")
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["message"]["content"].startswith("Why did the cloud") and not choice["message"].get("tool_calls")
    assert choice["finish_reason"] == "stop"
    omen = r.json()["sanctum"]["omens"][0]
    assert (omen["type"], omen["reason"], omen["spell"]) == ("SpellCallRejected", "ungrounded_arguments", "get_weather")
    assert omen["details"] == ['get_weather: city="Springfield", days=3 appear nowhere in the conversation']
    text_round = fake[0].requests[1]
    assert "response_format" not in text_round and "tools" not in text_round
    assert text_round["messages"] == SMALL_TALK["messages"]  # the conversation alone: no tools, no rejected turn


def test_a_made_up_call_is_kept_when_the_client_requires_a_call(client, fake):
    fake[0].push(answer_for(fake, MADE_UP))
    r = post(client, {**SMALL_TALK, "tool_choice": "required"}, spell_calling="prompted", constrain="always")
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert len(fake[0].requests) == 1


def test_one_grounded_call_keeps_the_whole_answer(client, fake):
    fake[0].push(answer_for(fake, {"tool_calls": [CALL, MADE_UP]}))
    r = post(client, spell_calling="prompted", constrain="always")
    assert len(r.json()["choices"][0]["message"]["tool_calls"]) == 2 and len(fake[0].requests) == 1


def test_streamed_made_up_call_becomes_the_text_rounds_live_content(client, fake):
    fake[0].push(Step(chunks=content_chunks(orjson.dumps(MADE_UP).decode(), 5)))
    fake[0].push(Step(chunks=content_chunks("No tool for jokes, but here is one.", 4)))
    body = {**SMALL_TALK, "stream": True, "sanctum": {"spell_calling": "prompted", "constrain": "always"}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        got = sse_chunks(r)
    deltas = [c["choices"][0]["delta"] for c in got if c.get("choices")]
    assert "".join(d.get("content") or "" for d in deltas) == "No tool for jokes, but here is one."
    assert sum(bool(d.get("content")) for d in deltas) > 1  # live, as the upstream wrote it, not one block
    assert not any(d.get("tool_calls") for d in deltas)
    assert got[-1]["choices"][0]["finish_reason"] == "stop"


def test_after_a_bounced_call_attempt_a_corrected_call_is_not_judged_for_made_up_values(client, fake):
    unknown = '<tool_call>{"name": "lookup_weather", "arguments": {"city": "Rome"}}</tool_call>'
    fake[0].push(Step(body=completion(unknown)))
    fake[0].push(answer_for(fake, MADE_UP))  # the unknown-name correction offers every tool, and text
    r = post(client, SMALL_TALK, spell_calling="prompted", constrain="repair")
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert valid(schemas_sent(fake)[0], {"content": "x"})  # text could have won, yet the model meant a call
    assert [o["reason"] for o in r.json()["sanctum"]["omens"]] == ["unknown_spell"]


TWO_CITIES = {**ASK, "messages": [{"role": "user", "content": "Weather in Paris and in Rome?"}]}
ROME = {"name": "get_weather", "arguments": {"city": "Rome"}}


@pytest.mark.parametrize("stream", [False, True])
def test_follow_up_calls_ask_for_the_next_call_until_one_adds_nothing_streamed_or_not(make_proxy, fake, stream):
    """follow_up_calls: after the first call, rounds constrained to one call each; a repeat ends them. Streamed
    and unstreamed give the same calls (the follow-up rounds are hidden)."""
    with httpx.Client(base_url=make_proxy(follow_up_calls=True), timeout=20) as client:
        answers = [orjson.dumps(a).decode() for a in (CALL, ROME, ROME)]
        fake[0].push(*(Step(chunks=content_chunks(a, 5)) if stream else Step(body=completion(a)) for a in answers))
        body = {**TWO_CITIES, "sanctum": {"spell_calling": "prompted", "constrain": "always"}}
        if stream:
            with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
                chunks = sse_chunks(r)
            deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
            assert not any(d.get("content") for d in deltas)
            calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
            arguments = ["".join(tc["function"].get("arguments", "") for tc in calls if tc["index"] == i)
                         for i in sorted({tc["index"] for tc in calls})]
            finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
            assert [f for f in finish if f] == ["tool_calls"]
        else:
            r = post(client, TWO_CITIES, spell_calling="prompted", constrain="always")
            arguments = [c["function"]["arguments"] for c in r.json()["choices"][0]["message"]["tool_calls"]]
            assert r.json()["sanctum"]["rounds"] == 3 and r.json()["sanctum"]["omens"] == []
    assert arguments == ['{"city":"Paris"}', '{"city":"Rome"}']
    first, second, third = fake[0].requests
    assert second["messages"][:-2] == first["messages"] and third["messages"][:-2] == second["messages"]
    schemas = schemas_sent(fake)
    assert valid(schemas[0], {"content": "x"}) and not valid(schemas[1], {"content": "x"})
    assert not valid(schemas[1], {"tool_calls": [CALL, ROME]}) and valid(schemas[1], ROME)


def test_follow_up_calls_are_off_by_default(client, fake):
    fake[0].push(answer_for(fake, CALL))
    r = post(client, TWO_CITIES, spell_calling="prompted", constrain="always")
    assert len(r.json()["choices"][0]["message"]["tool_calls"]) == 1 and len(fake[0].requests) == 1


def test_the_format_section_shows_hints_where_a_call_is_required_and_placeholders_where_text_may_win():
    # core/calls.example_text: under tool_choice required grounding never runs, so the example holds no value a
    # model could copy; where text may win, a copied placeholder is what grounding catches.
    assert '"arguments": {"city":<string>' in cn.format_section(BOOK, text=False, parallel=False, hints=True)
    assert '"arguments": {"city":"..."' in cn.format_section(BOOK, text=True, parallel=False)
