"""The round loop's transitions, one by one, with a scripted Sender (httpx MockTransport style): each round's
answer or error is written down in advance, and every body the loop sends is kept to look at.

Each test names the transition of repair/loop.py's state table it drives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ToolCallParseError, UpstreamError, UpstreamUnreachable
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.loop import run
from sanctum_proxy.repair.loop_data import Answer, ContentDelta, Final, Lesson, Plan, RoundRecord
from sanctum_proxy.repair.round_body import ANSWERED_IN_TEXT, CONSTRAINED_INSTEAD, NEXT_CALL
from tests.repair.plans import make_plan
from tests.tools import WEATHER_DESCRIBED as WEATHER

TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
         "prompt_tokens_details": {"cached_tokens": 4}}


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


GOOD = call("get_weather", '{"city": "Paris"}')
UNKNOWN = call("lookup_weather", '{"city": "Paris"}')
MISSING_ARG = call("get_weather", "{}")


@dataclass
class Round:
    """One scripted round: live text first (streamed as ContentDeltas), then the answer or an error."""

    message: dict[str, Any] | None = None
    finish_reason: str | None = "stop"
    usage: dict[str, Any] | None = field(default_factory=lambda: dict(USAGE))
    live_text: tuple[str, ...] = ()
    error: Exception | None = None


class Script:
    """A Sender answering each round from the script, in order; it keeps (body, live) of every round."""

    def __init__(self, *rounds: Round | dict[str, Any]) -> None:
        self.rounds = [r if isinstance(r, Round) else Round(r, "tool_calls" if r.get("tool_calls") else "stop")
                       for r in rounds]
        self.sent: list[dict[str, Any]] = []
        self.live: list[bool] = []

    async def __call__(self, body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | Answer]:
        assert self.rounds, f"the loop sent round {len(self.sent) + 1}, the script has no more"
        script = self.rounds.pop(0)
        self.sent.append(body)
        self.live.append(live)
        yield ContentDelta("")  # the upstream accepted the round
        for piece in script.live_text:
            yield ContentDelta(piece)
        if script.error is not None:
            raise script.error
        assert script.message is not None
        yield Answer(script.message, script.finish_reason, script.usage, {"id": f"up-{len(self.sent)}"})


def plan(**overrides: Any) -> Plan:
    return make_plan(ASK, TOOLS, **overrides)


async def events(the_plan: Plan, script: Script) -> list[Any]:
    return [e async for e in run(the_plan, script)]


async def final_of(the_plan: Plan, script: Script) -> tuple[Final, list[Any]]:
    got = await events(the_plan, script)
    assert isinstance(got[-1], Final), got[-1]
    assert not script.rounds, "every scripted round was sent"
    return got[-1], got


def omens_of(got: list[Any]) -> list[om.Omen]:
    return [e for e in got if isinstance(e, om.Omen)]


def names(message: dict[str, Any]) -> list[str]:
    return [c["function"]["name"] for c in message.get("tool_calls") or []]


# Accept

async def test_accept_clean_in_one_round():
    final, got = await final_of(plan(), Script(GOOD))
    assert final.outcome == "clean" and final.rounds == 1 and final.omens == [] and omens_of(got) == []
    assert final.message["tool_calls"][0]["id"] == "call_1" and final.finish_reason == "tool_calls"
    assert final.meta == {"id": "up-1"}


async def test_accept_repaired_yields_the_repair_omen_before_the_final():
    final, got = await final_of(plan(), Script(call("get_weather", "{'city': 'Paris',}")))
    assert final.outcome == "repaired" and final.rounds == 1
    assert orjson.loads(final.message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert [o.type for o in omens_of(got)] == ["SpellCallRepaired"] == [o.type for o in final.omens]
    assert got.index(omens_of(got)[0]) < got.index(final)


async def test_no_tools_offered_accepts_text_as_it_came():
    final, _ = await final_of(plan(body={"tools": None}, book=None), Script(text("Hello.")))
    assert final.message == text("Hello.") and final.outcome == "clean"


async def test_a_refusal_is_an_answer_in_one_round():
    refusal = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    final, _ = await final_of(plan(body={"tool_choice": "required"}), Script(refusal))
    assert final.message == refusal and final.rounds == 1


# Correct

async def test_correction_round_carries_the_rejected_answer_and_the_correction():
    script = Script(UNKNOWN, GOOD)
    final, got = await final_of(plan(), script)
    assert final.outcome == "rejected" and final.rounds == 2 and names(final.message) == ["get_weather"]
    second = script.sent[1]["messages"]
    assert second[:-2] == script.sent[0]["messages"]
    assert second[-2]["role"] == "assistant" and "lookup_weather" in second[-2]["content"]
    assert second[-1]["role"] == "user" and "get_weather" in second[-1]["content"]
    rejected = omens_of(got)[0]
    assert rejected.type == "SpellCallRejected" and rejected.fields["correction"] == second[-1]["content"]


async def test_a_correction_about_one_known_tool_pins_the_constrained_round_to_it():
    script = Script(MISSING_ARG, GOOD)
    final, got = await final_of(plan(constrain="repair", mode="prompted"), script)
    schema = script.sent[1]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["name"] == {"const": "get_weather"}  # one call, of get_weather only
    assert names(final.message) == ["get_weather"]


async def test_an_unknown_tool_is_not_pinned():
    script = Script(UNKNOWN, GOOD)
    await final_of(plan(constrain="repair", mode="prompted"), script)
    schema = script.sent[1]["response_format"]["json_schema"]["schema"]
    assert "anyOf" in schema  # every tool, text and several calls still offered


async def test_a_fresh_correction_round_leaves_the_earlier_turns_out_and_its_omen_says_so():
    script = Script(UNKNOWN, GOOD)
    _, got = await final_of(plan(constrain="repair", mode="prompted", correction_context="fresh"), script)
    assert script.sent[1]["messages"][-1] == script.sent[0]["messages"][-1]  # no hidden turns
    assert omens_of(got)[0].fields["correction"] == CONSTRAINED_INSTEAD
    assert cn.is_constrained(script.sent[1]) and not cn.is_constrained(script.sent[0])


# Surrender

async def test_surrender_after_max_rounds_raises_422_with_every_rejected_answer():
    script = Script(UNKNOWN, call("nope", '{"city": "B"}'), call("nada", '{"city": "C"}'))
    seen: list[Any] = []
    with pytest.raises(ToolCallParseError) as caught:
        async for event in run(plan(), script):
            seen.append(event)
    assert caught.value.status == 422 and caught.value.body()["error"]["rounds"] == 3
    assert len(caught.value.body()["error"]["rejected"]) == 3
    assert [o.type for o in omens_of(seen)] == ["SpellCallRejected"] * 2  # yielded before the raise


async def test_surrender_as_content_is_the_last_rejected_answer():
    script = Script(UNKNOWN, call("nope", '{"city": "B"}'), call("nada", '{"city": "C"}'))
    final, got = await final_of(plan(on_surrender="content"), script)
    assert final.outcome == "surrendered" and final.finish_reason == "stop"
    assert "nada" in final.message["content"] and "tool_calls" not in final.message
    assert [o.type for o in final.omens][-1] == "SpellCallSurrendered"


async def test_repeating_the_rejected_answer_verbatim_surrenders_early():
    script = Script(UNKNOWN, UNKNOWN)
    with pytest.raises(ToolCallParseError, match="repeated a rejected call verbatim"):
        await events(plan(max_rounds=5), script)
    assert len(script.sent) == 2


async def test_round_limit_counts_the_fallback_and_the_unconstrained_retry():
    schema_refused = Round(error=UpstreamError(400, "response_format json_schema is not supported"))
    tools_refused = Round(error=UpstreamError(500, "tools param requires --jinja flag"))
    prompted_unknown = text('<tool_call>{"name": "lookup_weather", "arguments": {"city": "Paris"}}</tool_call>')
    script = Script(UNKNOWN, schema_refused, tools_refused, prompted_unknown)
    with pytest.raises(ToolCallParseError, match="round limit") as caught:
        await events(plan(max_rounds=1, constrain="repair", auto=True), script)
    assert len(script.sent) == 4 and caught.value.body()["error"]["rounds"] == 4  # max_rounds + 2 + 1


# Fall back (auto)

async def test_tools_rejected_falls_back_to_prompted_and_teaches_the_caller():
    refused = Round(error=UpstreamError(500, "tools param requires --jinja flag"))
    script = Script(refused, text('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'))
    final, got = await final_of(plan(auto=True), script)
    assert final.mode == "prompted" and final.outcome == "fallback" and names(final.message) == ["get_weather"]
    assert [e for e in got if isinstance(e, Lesson)] == [Lesson("tools_rejected")]
    assert omens_of(got)[0].fields["reason"] == "tools_rejected" and "tools" not in script.sent[1]
    assert script.live == [True, True]  # nothing was shown: the prompted round is live


async def test_an_empty_answer_to_a_tools_request_falls_back_in_auto_mode():
    script = Script(Round(text(""), "stop"), text('<tool_call>{"name": "get_weather", '
                                                  '"arguments": {"city": "Paris"}}</tool_call>'))
    final, got = await final_of(plan(auto=True), script)
    assert [e for e in got if isinstance(e, Lesson)] == [Lesson("upstream_parse_failure")]
    assert final.mode == "prompted" and final.usage["prompt_tokens"] == 20


async def test_without_auto_an_error_is_raised_as_it_came_and_nothing_is_learned():
    script = Script(Round(error=UpstreamError(500, "tools param requires --jinja flag")))
    with pytest.raises(UpstreamError):
        await events(plan(), script)
    unreachable = Script(Round(error=UpstreamUnreachable("connection refused")))
    with pytest.raises(UpstreamUnreachable):
        await events(plan(auto=True), unreachable)


async def test_opening_omens_come_first_and_count_as_a_fallback():
    probe = om.fallback(0, "capability_probe", None, "props")
    final, got = await final_of(plan(mode="prompted", opening_omens=(probe,)),
                                Script(text('<tool_call>{"name": "get_weather", '
                                            '"arguments": {"city": "Paris"}}</tool_call>')))
    assert got[0] is probe and final.outcome == "fallback" and final.omens[0] is probe


# Unconstrain

async def test_a_refused_schema_sends_the_round_again_unconstrained_and_teaches_the_caller():
    refused = Round(error=UpstreamError(400, "Unsupported param: response_format"))
    script = Script(UNKNOWN, refused, GOOD)
    final, got = await final_of(plan(constrain="repair", mode="prompted"), script)
    assert [e for e in got if isinstance(e, Lesson)] == [Lesson("schema_refused", "schema")]
    assert cn.is_constrained(script.sent[1]) and "response_format" not in script.sent[2]
    assert script.sent[2]["messages"][-1]["role"] == "user"  # the correction, sent after all
    assert final.rounds == 3 and names(final.message) == ["get_weather"]


# Ask for text

SMALL_TALK = [{"role": "user", "content": "Hi there, how are you?"}]


async def test_a_made_up_call_under_free_choice_is_asked_again_without_tools():
    made_up = text('{"name": "get_weather", "arguments": {"city": "Atlantis"}}')
    script = Script(made_up, text("I'm fine, thanks!"))
    final, got = await final_of(plan(body={"messages": SMALL_TALK}, mode="prompted", constrain="always"), script)
    assert cn.is_constrained(script.sent[0]) and "response_format" not in script.sent[1]
    assert "tools" not in script.sent[1] and script.sent[1]["messages"][-1]["content"] == SMALL_TALK[0]["content"]
    assert final.message["content"] == "I'm fine, thanks!" and "tool_calls" not in final.message
    assert omens_of(got)[0].fields["reason"] == "ungrounded_arguments"
    assert omens_of(got)[0].fields["correction"] == ANSWERED_IN_TEXT
    assert script.live == [True, True]


async def test_a_broken_call_under_free_choice_is_asked_again_without_tools():
    cut = Round(text('{"name": "get_weather", "arguments": {"city": "Paris Paris Paris'), "length")
    script = Script(cut, text("Sorry."))
    final, got = await final_of(plan(mode="prompted", constrain="always"), script)
    assert final.message["content"] == "Sorry." and omens_of(got)[0].fields["reason"] == "malformed_json"


ANSWERED = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c0", "content": "sunny, 24C"}]


async def test_a_repeated_answered_call_is_asked_again_for_text_with_the_result():
    script = Script(GOOD, text("It is sunny, 24C."))
    final, got = await final_of(plan(body={"messages": ANSWERED}), script)
    closing = script.sent[1]["messages"][-1]
    assert closing["role"] == "user" and "sunny, 24C" in closing["content"]
    assert len(script.sent[1]["messages"]) == len(ANSWERED) + 1 and "tools" not in script.sent[1]
    assert "sunny, 24C" in str(script.sent[1]["messages"][-2])  # the result, in the prompted history
    assert omens_of(got)[0].fields["reason"] == "repeated_call"
    assert omens_of(got)[0].fields["correction"] == closing["content"]
    assert final.message["content"] == "It is sunny, 24C." and script.live == [True, True]


async def test_a_required_call_is_never_bounced_as_a_repeat():
    final, _ = await final_of(plan(body={"messages": ANSWERED, "tool_choice": "required"}), Script(GOOD))
    assert names(final.message) == ["get_weather"] and final.rounds == 1


# Usage and live rounds

async def test_usage_is_summed_over_rounds_with_details():
    final, _ = await final_of(plan(), Script(UNKNOWN, Round(GOOD, "tool_calls", {**USAGE, "vendor": "x"})))
    assert final.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30,
                           "prompt_tokens_details": {"cached_tokens": 8}, "vendor": "x"}


async def test_no_usage_from_the_upstream_is_none():
    final, _ = await final_of(plan(), Script(Round(GOOD, "tool_calls", None)))
    assert final.usage is None


async def test_only_the_first_round_is_live_and_its_text_passes_through():
    script = Script(Round(UNKNOWN, "tool_calls", live_text=("Let me ", "check.")), GOOD)
    final, got = await final_of(plan(), script)
    assert script.live == [True, False]
    assert "".join(e.text for e in got if isinstance(e, ContentDelta)) == "Let me check."


async def test_after_live_text_a_fallback_round_is_hidden():
    script = Script(Round(text(""), "stop", live_text=("<think>hm</think>",)),
                    text('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'))
    await final_of(plan(auto=True), script)
    assert script.live == [True, False]


async def test_each_round_is_recorded_with_its_outcome():
    _, got = await final_of(plan(constrain="repair", mode="prompted"), Script(UNKNOWN, GOOD))
    assert [(r.number, r.outcome, r.constrained) for r in got if isinstance(r, RoundRecord)] == [
        (1, "pending", False), (1, "rejected", False), (2, "pending", True), (2, "accepted", True)]


# What a correction round keeps (docs/contract.md section 5): the first round's body plus the new turns

def assert_prefix_kept(first: dict[str, Any], second: dict[str, Any]) -> None:
    assert second["messages"][:len(first["messages"])] == first["messages"]
    assert [m["role"] for m in second["messages"][len(first["messages"]):]] == ["assistant", "user"]


async def test_a_native_correction_keeps_every_tool_and_requires_a_call():
    script = Script(MISSING_ARG, GOOD)
    _, got = await final_of(plan(constrain="repair"), script)  # whatever the upstream said of its template
    first, second = script.sent
    assert_prefix_kept(first, second)
    assert second["tools"] == first["tools"] == TOOLS and second["tool_choice"] == "required"
    assert omens_of(got)[0].fields["correction"] == second["messages"][-1]["content"]


async def test_a_prompted_correction_keeps_the_prompt_with_a_grammar_where_the_upstream_takes_one():
    hermes = text('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>')
    script = Script(hermes, text('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'))
    final, _ = await final_of(plan(constrain="repair", mode="prompted", grammar=True), script)
    first, second = script.sent
    assert_prefix_kept(first, second)
    assert "get_weather" in second["grammar"] and "get_time" not in second["grammar"]  # pinned
    assert "response_format" not in second and names(final.message) == ["get_weather"]
    assert the_plan_records_constrained(script) == [False, True]


def the_plan_records_constrained(script: Script) -> list[bool]:
    return ["grammar" in body or "response_format" in body or body.get("tool_choice") == "required"
            for body in script.sent]


async def test_a_prompted_correction_without_a_grammar_keeps_the_prompt_under_the_answer_schema():
    hermes = text('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>')
    script = Script(hermes, text('{"name": "get_weather", "arguments": {"city": "Paris"}}'))
    final, _ = await final_of(plan(constrain="repair", mode="prompted"), script)
    first, second = script.sent
    assert_prefix_kept(first, second)
    assert cn.is_constrained(second) and "grammar" not in second
    assert names(final.message) == ["get_weather"]  # the answer object, decoded


async def test_under_always_a_pinned_correction_keeps_the_first_rounds_prompt_and_narrows_only_the_schema():
    script = Script(text('{"name": "get_weather", "arguments": {}}'),
                    text('{"name": "get_weather", "arguments": {"city": "Paris"}}'))
    final, _ = await final_of(plan(constrain="always", mode="prompted"), script)
    first, second = script.sent
    assert_prefix_kept(first, second)
    assert second["response_format"]["json_schema"]["schema"]["properties"]["name"] == {"const": "get_weather"}
    assert "anyOf" in first["response_format"]["json_schema"]["schema"] and names(final.message) == ["get_weather"]


async def test_a_refused_tool_choice_is_learnt_and_the_correction_goes_unconstrained_with_the_transcript():
    refused = Round(error=UpstreamError(400, 'tool_choice = "required" is not supported!'))
    script = Script(MISSING_ARG, refused, GOOD)
    final, got = await final_of(plan(constrain="repair"), script)
    first, second, third = script.sent
    assert second["tool_choice"] == "required" and "tool_choice" not in third
    assert_prefix_kept(first, third)
    assert third["messages"] == second["messages"]  # the transcript still
    assert Lesson("tool_choice_refused", "tool_choice") in got and names(final.message) == ["get_weather"]


async def test_after_a_refusal_native_corrections_go_without_tool_choice():
    script = Script(MISSING_ARG, GOOD)
    _, got = await final_of(plan(constrain="repair", tool_choice=False), script)
    first, second = script.sent
    assert_prefix_kept(first, second)
    assert "tool_choice" not in second and second["tools"] == TOOLS
    assert omens_of(got)[0].fields["correction"] == second["messages"][-1]["content"]


# Ask for more (follow_up_calls, under constrain "always")

TWO_CITIES = [{"role": "user", "content": "Weather in Paris and in Rome?"}]


def answer_object(name: str, **arguments: Any) -> dict[str, Any]:
    return text(orjson.dumps({"name": name, "arguments": arguments}).decode())



def follow_up(**overrides: Any) -> Plan:
    return plan(**{"body": {"messages": TWO_CITIES}, "mode": "prompted", "constrain": "always",
                   "follow_up_calls": True, **overrides})


async def test_after_one_call_a_more_round_asks_for_the_next_and_keeps_it_while_it_adds_a_value():
    script = Script(answer_object("get_weather", city="Paris"), answer_object("get_weather", city="Rome"),
                    answer_object("get_weather", city="Paris"))
    final, got = await final_of(follow_up(), script)
    assert [orjson.loads(c["function"]["arguments"]) for c in final.message["tool_calls"]] == [
        {"city": "Paris"}, {"city": "Rome"}]
    assert final.finish_reason == "tool_calls" and final.rounds == 3 and omens_of(got) == []
    first, second, third = script.sent
    assert second["messages"][:-2] == first["messages"]  # the first round's prompt, byte for byte, then the turns
    assert orjson.loads(second["messages"][-2]["content"]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert second["messages"][-1] == {"role": "user", "content": NEXT_CALL}
    assert third["messages"][:-2] == second["messages"]
    assert all(cn.is_constrained(b) for b in script.sent)
    schema = second["response_format"]["json_schema"]["schema"]
    assert "tool_calls" not in orjson.dumps(schema).decode() and "content" not in orjson.dumps(schema).decode()
    assert first["messages"][0] == second["messages"][0]  # the format section still offers text: same prompt
    assert script.live == [True, False, False]
    assert final.usage is not None and final.usage["prompt_tokens"] == 30


async def test_a_more_round_that_adds_nothing_keeps_the_one_call():
    script = Script(answer_object("get_weather", city="Paris"), answer_object("get_weather", city="Paris"))
    final, got = await final_of(follow_up(body={"messages": ASK}), script)
    assert names(final.message) == ["get_weather"] and final.message["content"] is None
    assert final.rounds == 2 and final.outcome == "clean" and omens_of(got) == []


@pytest.mark.parametrize("again", [
    answer_object("get_weather", city="Paris"),  # the same call again
    answer_object("get_weather", city="Atlantis"),  # a value nobody gave
    answer_object("get_weather", city="Rome weather"),  # not in the conversation whole
    answer_object("get_time", city="Paris"),  # another tool, with the held call's values
    text('{"name": "get_weather", "arguments": {"city": "Ro'),  # cut off
    answer_object("get_weather"),  # missing its argument
    text("All done."),  # an upstream that ignored the schema
])
async def test_a_more_round_call_that_adds_nothing_is_left_out(again: dict[str, Any]):
    script = Script(answer_object("get_weather", city="Paris"), again)
    final, _ = await final_of(follow_up(), script)
    assert [c["function"]["arguments"] for c in final.message["tool_calls"]] == ['{"city":"Paris"}']


async def test_a_more_round_may_call_another_tool_with_a_new_value():
    asked = [{"role": "user", "content": "Weather in Paris, and the time in Rome?"}]
    script = Script(answer_object("get_weather", city="Paris"), answer_object("get_time", city="Rome"),
                    answer_object("get_time", city="Rome"))
    final, _ = await final_of(follow_up(body={"messages": asked}), script)
    assert names(final.message) == ["get_weather", "get_time"]


async def test_more_rounds_stop_at_the_round_limit():
    cities = [{"role": "user", "content": "Weather in Paris, Rome, Oslo and Lima?"}]
    script = Script(*(answer_object("get_weather", city=c) for c in ("Paris", "Rome", "Oslo")))
    final, _ = await final_of(follow_up(body={"messages": cities}, max_rounds=2), script)
    assert [orjson.loads(c["function"]["arguments"])["city"] for c in final.message["tool_calls"]] == [
        "Paris", "Rome", "Oslo"]
    assert final.rounds == 3  # 1 + max_rounds, as with corrections


@pytest.mark.parametrize("overrides", [
    {"follow_up_calls": False},
    {"body": {"messages": TWO_CITIES, "parallel_tool_calls": False}},
    {"body": {"messages": TWO_CITIES, "tool_choice": "required"}},
    {"max_rounds": 0},
])
async def test_no_more_round_when_off_without_parallel_calls_or_without_free_choice(overrides: dict[str, Any]):
    script = Script(answer_object("get_weather", city="Paris"))
    final, _ = await final_of(follow_up(**overrides), script)
    assert names(final.message) == ["get_weather"] and final.rounds == 1


async def test_a_repaired_first_call_keeps_its_omen_once_when_more_rounds_follow():
    script = Script(answer_object("Get_Weather", city="Paris"), answer_object("get_weather", city="Paris"))
    final, got = await final_of(follow_up(body={"messages": ASK}), script)
    assert names(final.message) == ["get_weather"] and final.rounds == 2
    assert [o.type for o in omens_of(got)] == [o.type for o in final.omens] == [om.OmenType.REPAIRED]


@pytest.mark.parametrize("error", [UpstreamError(500, "boom"), UpstreamUnreachable("gone")])
async def test_a_more_round_that_fails_leaves_the_calls_held_so_far(error: Exception):
    script = Script(answer_object("get_weather", city="Paris"), answer_object("get_weather", city="Rome"),
                    Round(error=error))
    final, got = await final_of(follow_up(), script)
    assert [orjson.loads(c["function"]["arguments"])["city"] for c in final.message["tool_calls"]] == ["Paris", "Rome"]
    assert final.rounds == 3 and omens_of(got) == []


async def test_a_more_round_value_must_come_from_the_user_not_from_a_tool_result():
    asked = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "get_time", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "14:00 in Paris; it is raining in Rome"}]
    script = Script(answer_object("get_weather", city="Paris"), answer_object("get_weather", city="Rome"))
    final, _ = await final_of(follow_up(body={"messages": asked}), script)
    assert [c["function"]["arguments"] for c in final.message["tool_calls"]] == ['{"city":"Paris"}']
