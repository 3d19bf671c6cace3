"""repair/loop.py's two pure steps called directly, without a Sender or HTTP: `next_round` (what a round sends,
and the state once it is sent) and `judge` / `judge_error` (the verdict on its answer or error, and the state
of the round after it). The driver `run` is tested with a scripted Sender in test_loop.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ToolCallParseError, UpstreamError, UpstreamUnreachable
from sanctum_proxy.repair.answers import READ_FROM_ERROR
from sanctum_proxy.repair.constrain import decoded
from sanctum_proxy.repair.loop import (
    Accept,
    AskForText,
    Correct,
    Fail,
    FallBack,
    Kind,
    Phase,
    Round,
    State,
    Surrender,
    Unconstrain,
    judge,
    judge_error,
    next_round,
)
from sanctum_proxy.repair.loop_data import Answer, Lesson, Plan
from sanctum_proxy.repair.round_body import CONSTRAINED_INSTEAD
from tests.repair.plans import make_plan

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]


def plan(**overrides: Any) -> Plan:
    return make_plan(ASK, [WEATHER, TIME], **overrides)


def native_call(name: str, arguments: str) -> Answer:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return Answer(message, "tool_calls", None, {"id": "up-1"})


def text(content: str) -> Answer:
    return Answer({"role": "assistant", "content": content}, "stop", None, {"id": "up-1"})


def hermes(name: str, arguments: dict[str, Any]) -> Answer:
    return text(f"<tool_call>{orjson.dumps({'name': name, 'arguments': arguments}).decode()}</tool_call>")


def upstream_error(status: int, message: str, **fields: Any) -> UpstreamError:
    """An error as the upstream client raises it from a JSON error body (`{"error": {"message": ...}}`)."""
    return UpstreamError(status, message, {"error": {"message": message, **fields}})


def first(the_plan: Plan) -> tuple[Round, State]:
    return next_round(the_plan, State(the_plan.mode), 0)


def rejected_once(the_plan: Plan, answer: Answer) -> tuple[Round, State, Correct]:
    """The first round, and the Correct verdict on its (bad) answer."""
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, answer, 1)
    assert isinstance(verdict, Correct), verdict
    return step, state, verdict


# next_round: the first round's body, per mode

def test_a_native_first_round_sends_the_request_with_its_tools_unconstrained():
    step, state = first(plan())
    assert step.constraint is None and not step.free_choice and state == State("native")
    assert step.body["messages"] == ASK and [t["function"]["name"] for t in step.body["tools"]] == [
        "get_weather", "get_time"]
    assert "tool_choice" not in step.body and "grammar" not in step.body and "response_format" not in step.body


def test_a_native_first_round_sends_a_named_tool_choice_as_that_tool_required():
    """llama.cpp reads the object form as "auto" (upstream_body.native_body)."""
    named = {"type": "function", "function": {"name": "get_time"}}
    step, _ = first(plan(body={"tool_choice": named}))
    assert step.body["tool_choice"] == "required" and [t["function"]["name"] for t in step.body["tools"]] == [
        "get_time"]


def test_a_prompted_first_round_puts_the_tools_in_the_system_prompt():
    step, state = first(plan(mode="prompted"))
    assert step.constraint is None and state.phase is Phase.WAITING
    assert "tools" not in step.body and "tool_choice" not in step.body
    system = step.body["messages"][0]
    assert system["role"] == "system" and "Be brief." in system["content"] and "get_weather" in system["content"]
    assert "<tool_call>" in system["content"]  # the Hermes format it asks for
    assert step.body["messages"][1:] == ASK[1:]


def test_under_constrain_always_a_prompted_first_round_is_a_free_choice_schema_round():
    step, state = first(plan(mode="prompted", constrain="always"))
    assert step.constraint is not None and step.constraint.how == "schema" and step.constraint.text
    assert step.free_choice  # text or a call, with no call attempt before it
    assert state.phase is Phase.CONSTRAINING and state.grammar_from == 0
    assert step.body["response_format"]["type"] == "json_schema" and "tools" not in step.body


def test_constrain_repair_leaves_the_first_round_unconstrained_on_every_upstream():
    for the_plan in (plan(constrain="repair"), plan(mode="prompted", constrain="repair", grammar=True)):
        step, state = first(the_plan)
        assert step.constraint is None and state.phase is Phase.WAITING


def test_without_tools_the_first_round_is_the_request_as_it_came():
    step, _ = first(plan(body={"tools": None}, book=None))
    assert step.constraint is None and step.body["messages"] == ASK


def test_past_the_round_limit_next_round_raises_with_every_rejected_answer():
    the_plan = plan(max_rounds=1)
    next_round(the_plan, State("native"), the_plan.max_rounds + 2)  # 1 + N rounds, a fallback, a retry: sent
    with pytest.raises(ToolCallParseError) as caught:
        next_round(the_plan, State("native", rejected=("a", "b")), the_plan.max_rounds + 3)
    assert caught.value.status == 422 and caught.value.rejected == ["a", "b"] and caught.value.rounds == 4


# judge: accepting

def test_a_clean_call_is_accepted_as_the_message_for_the_client():
    the_plan = plan()
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, native_call("get_weather", '{"city": "Paris"}'), 1)
    assert isinstance(verdict, Accept) and verdict.finish_reason == "tool_calls" and verdict.omens == ()
    assert verdict.message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_a_call_tier_1_mends_is_accepted_with_its_repair_omen():
    the_plan = plan()
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, native_call("get_weather", "{'city': 'Paris',}"), 1)
    assert isinstance(verdict, Accept) and [o.type for o in verdict.omens] == [om.OmenType.REPAIRED]
    assert orjson.loads(verdict.message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_a_prompted_rounds_call_in_its_own_format_is_read_as_a_native_call():
    the_plan = plan(mode="prompted")
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, hermes("get_time", {"city": "Oslo"}), 1)
    assert isinstance(verdict, Accept) and verdict.message["content"] is None
    assert [c["function"]["name"] for c in verdict.message["tool_calls"]] == ["get_time"]


def test_text_answers_a_request_that_requires_no_call():
    the_plan = plan()
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, text("It is sunny."), 1)
    assert isinstance(verdict, Accept) and verdict.message["content"] == "It is sunny."
    assert verdict.finish_reason == "stop"


# judge: a correction, and the round after it

def test_a_rejected_answer_becomes_the_next_rounds_turns_with_its_correction():
    the_plan = plan()
    bad = native_call("get_weather", '{"town": "Paris"}')  # the required city is missing
    _, state, verdict = rejected_once(the_plan, bad)
    after = verdict.state
    assert after.kind is Kind.ASK and after.repair_rounds == 1 and after.pin == "get_weather"
    assistant, user = after.turns
    assert assistant["role"] == "assistant" and "town" in assistant["content"]
    assert user["role"] == "user" and "city" in user["content"]
    assert len(after.rejected) == 1 and "town" in after.rejected[0]
    assert {o.type for o in verdict.omens} == {om.OmenType.REJECTED}  # one per problem: missing city, town
    assert verdict.omens[0].fields["correction"] == user["content"]  # what the model will read


def test_the_correction_round_is_the_first_rounds_body_plus_the_new_turns():
    the_plan = plan()
    step, _, verdict = rejected_once(the_plan, native_call("get_weather", '{"town": "Paris"}'))
    again, _ = next_round(the_plan, verdict.state, 1)
    assert again.body["messages"] == [*step.body["messages"], *verdict.state.turns]
    assert again.body["tools"] == step.body["tools"] and again.constraint is None  # constrain "off"


def test_an_unknown_tool_is_corrected_unpinned():
    _, _, verdict = rejected_once(plan(), native_call("get_forecast", '{"city": "Paris"}'))
    assert verdict.state.pin is None


@pytest.mark.parametrize(("overrides", "how"), [
    ({"mode": "prompted", "grammar": True}, "grammar"),  # llama.cpp: a GBNF grammar in the prompt's own format
    ({"mode": "prompted"}, "schema"),  # elsewhere: the answer schema
    ({"mode": "native"}, "tool_choice"),  # a native round: tool_choice "required"
    ({"mode": "native", "native_calls": False, "grammar": True}, "grammar"),  # its template drops the tools
], ids=["llama.cpp-grammar", "schema", "native-tool_choice", "template-drops-tools"])
def test_the_correction_round_is_constrained_per_upstream_kind(overrides, how):
    the_plan = plan(constrain="repair", **overrides)
    bad = native_call("get_weather", '{"town": "Paris"}') if the_plan.mode == "native" else hermes(
        "get_weather", {"town": "Paris"})
    step, _, verdict = rejected_once(the_plan, bad)
    again, state = next_round(the_plan, verdict.state, 1)
    assert again.constraint is not None and again.constraint.how == how and not again.free_choice
    assert state.phase is Phase.CONSTRAINING and state.grammar_from == 2
    assert again.constraint.prompted == (the_plan.native_calls is False)
    if not again.constraint.prompted:  # the first round's body byte for byte, then the new turns
        assert again.body["messages"][:len(step.body["messages"])] == step.body["messages"]
    assert again.body["messages"][-2:] == list(verdict.state.turns)
    if how == "grammar":
        assert isinstance(again.body["grammar"], str) and "response_format" not in again.body
    elif how == "schema":
        assert again.body["response_format"]["type"] == "json_schema" and "grammar" not in again.body
    else:
        assert again.body["tool_choice"] == "required" and len(again.body["tools"]) == 2  # every tool kept
    assert ("tools" in again.body) == (how == "tool_choice")


def test_a_native_correction_goes_unconstrained_where_tool_choice_was_refused_before():
    the_plan = plan(constrain="repair", tool_choice=False)
    _, _, verdict = rejected_once(the_plan, native_call("get_weather", '{"town": "Paris"}'))
    again, _ = next_round(the_plan, verdict.state, 1)
    assert again.constraint is None and "tool_choice" not in again.body


def test_a_clients_own_response_format_is_never_replaced():
    the_plan = plan(mode="prompted", constrain="repair", body={"response_format": {"type": "json_object"}})
    _, _, verdict = rejected_once(the_plan, hermes("get_weather", {"town": "Paris"}))
    again, _ = next_round(the_plan, verdict.state, 1)
    assert again.constraint is None and again.body["response_format"] == {"type": "json_object"}


def test_under_correction_context_fresh_the_omen_says_the_correction_was_not_sent():
    the_plan = plan(mode="prompted", constrain="repair", correction_context="fresh")
    step, _, verdict = rejected_once(the_plan, hermes("get_weather", {"town": "Paris"}))
    assert verdict.omens[0].fields["correction"] == CONSTRAINED_INSTEAD
    again, _ = next_round(the_plan, verdict.state, 1)
    assert again.constraint is not None and again.constraint.json_prompt
    assert len(again.body["messages"]) == len(step.body["messages"])  # no transcript


def test_the_same_rejected_text_twice_surrenders():
    the_plan = plan()
    bad = native_call("get_weather", '{"town": "Paris"}')
    step, state, verdict = rejected_once(the_plan, bad)
    again, after = next_round(the_plan, verdict.state, 1)
    surrender = judge(the_plan, after, again, bad, 2)
    assert isinstance(surrender, Surrender) and "repeated a rejected call verbatim" in surrender.message
    assert len(surrender.rejected) == 2


def test_problems_after_max_rounds_surrender_or_answer_as_text_under_on_surrender_content():
    bad = native_call("get_weather", '{"town": "Paris"}')
    spent = State("native", turns=({"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}),
                  rejected=("x",))
    step, _ = next_round(plan(max_rounds=1), spent, 1)
    verdict = judge(plan(max_rounds=1), spent, step, bad, 2)
    assert isinstance(verdict, Surrender) and "after 1 repair round(s)" in verdict.message
    content = judge(plan(max_rounds=1, on_surrender="content"), spent, step, bad, 2)
    assert isinstance(content, Accept) and content.surrendered and content.finish_reason == "stop"
    assert [o.type for o in content.omens] == [om.OmenType.SURRENDERED]


def test_a_made_up_call_under_free_choice_is_asked_again_without_tools():
    """The schema let the model choose text or a call; no value of its call comes from the conversation."""
    the_plan = plan(mode="prompted", constrain="always")
    step, state = first(the_plan)
    written = orjson.dumps({"name": "get_time", "arguments": {"city": "Atlantis"}}).decode()  # an answer object
    made_up = decoded(Answer({"role": "assistant", "content": written}, "stop", None, {}), step.constraint, the_plan)
    assert made_up.message["tool_calls"][0]["function"]["name"] == "get_time"  # as the driver hands it to judge
    verdict = judge(the_plan, state, step, made_up, 1)
    assert isinstance(verdict, AskForText) and verdict.state.kind is Kind.TEXT
    text_round, _ = next_round(the_plan, verdict.state, 1)
    assert text_round.constraint is None and "tools" not in text_round.body
    assert "response_format" not in text_round.body and "get_time" not in str(text_round.body["messages"])
    answered = judge(the_plan, verdict.state, text_round, text("I know of no Atlantis."), 2)
    assert isinstance(answered, Accept) and answered.message["content"] == "I know of no Atlantis."


def test_the_same_made_up_call_is_judged_as_usual_after_a_call_attempt_was_bounced():
    """After a call attempt of its own was corrected the model meant to call: no free choice, no text round."""
    the_plan = plan(mode="prompted", constrain="always")
    bounced = State("prompted", turns=({"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}),
                    phase=Phase.CONSTRAINING)
    again, after = next_round(the_plan, bounced, 1)
    assert not again.free_choice
    written = orjson.dumps({"name": "get_time", "arguments": {"city": "Atlantis"}}).decode()
    answer = decoded(Answer({"role": "assistant", "content": written}, "stop", None, {}), again.constraint, the_plan)
    assert isinstance(judge(the_plan, after, again, answer, 2), Accept)


# judge_error

def constrained_correction(the_plan: Plan) -> tuple[Round, State]:
    bad = native_call("get_weather", '{"town": "Paris"}') if the_plan.mode == "native" else hermes(
        "get_weather", {"town": "Paris"})
    _, _, verdict = rejected_once(the_plan, bad)
    return next_round(the_plan, verdict.state, 1)


def test_a_refused_tool_choice_sends_the_round_again_unconstrained_and_teaches_the_caller():
    the_plan = plan(constrain="repair")
    step, state = constrained_correction(the_plan)
    refused = upstream_error(400, "tool_choice param requires --jinja flag")  # llama.cpp without --jinja
    verdict = judge_error(the_plan, state, step, refused, 2)
    assert isinstance(verdict, Unconstrain) and verdict.lesson == Lesson("tool_choice_refused", "tool_choice")
    assert verdict.state.phase is Phase.REFUSED and verdict.state.turns == state.turns
    again, _ = next_round(the_plan, verdict.state, 2)
    assert again.constraint is None and "tool_choice" not in again.body


def test_a_refused_schema_sends_the_round_again_unconstrained_and_teaches_the_caller():
    the_plan = plan(mode="prompted", constrain="repair")
    step, state = constrained_correction(the_plan)
    assert step.constraint is not None and step.constraint.how == "schema"
    refused = upstream_error(400, "response_format of type json_schema is not supported by this server")
    verdict = judge_error(the_plan, state, step, refused, 2)
    assert isinstance(verdict, Unconstrain) and verdict.lesson == Lesson("schema_refused", "schema")
    again, _ = next_round(the_plan, verdict.state, 2)
    assert again.constraint is None and "response_format" not in again.body


def context_overflow() -> UpstreamError:
    """llama-server's 400 for a prompt over its context (tools/server/server-context.cpp)."""
    return upstream_error(400, "request (2132 tokens) exceeds the available context size (2048 tokens), try "
                          "increasing it", code=400, type="exceed_context_size_error", n_prompt_tokens=2132,
                          n_ctx=2048)


def test_a_correction_round_over_the_context_goes_again_once_fresh_without_the_transcript():
    the_plan = plan(mode="prompted", constrain="repair", grammar=True)
    step, state = constrained_correction(the_plan)
    verdict = judge_error(the_plan, state, step, context_overflow(), 2)
    assert isinstance(verdict, Correct) and verdict.outcome == "too_long" and verdict.omens == ()
    assert verdict.state.fresh and verdict.state.phase is Phase.CONSTRAINING
    fresh, _ = next_round(the_plan, verdict.state, 2)
    assert fresh.constraint is not None and fresh.constraint.how == "schema" and fresh.constraint.json_prompt
    assert "grammar" not in fresh.body and fresh.body["response_format"]["type"] == "json_schema"
    assert len(fresh.body["messages"]) == len(first(the_plan)[0].body["messages"])  # no transcript
    again = judge_error(the_plan, verdict.state, fresh, context_overflow(), 3)  # only once
    assert isinstance(again, Surrender) and "exceeded the upstream's context" in again.message


def test_a_correction_round_over_the_context_surrenders_without_constraining():
    the_plan = plan(mode="prompted")
    step, state = constrained_correction(the_plan)
    assert step.constraint is None
    verdict = judge_error(the_plan, state, step, context_overflow(), 2)
    assert isinstance(verdict, Surrender) and verdict.rejected == state.rejected
    content = judge_error(plan(mode="prompted", on_surrender="content"), state, step, context_overflow(), 2)
    assert isinstance(content, Accept) and content.surrendered
    assert content.message["content"] == state.rejected[-1]


def test_a_first_round_over_the_context_is_the_clients_own_error():
    the_plan = plan(mode="prompted", constrain="repair")
    step, state = first(the_plan)
    verdict = judge_error(the_plan, state, step, context_overflow(), 1)
    assert isinstance(verdict, Fail) and verdict.error.status == 400


PARSE_FAILURE = "Failed to parse input at pos 0: "  # llama.cpp common/chat.cpp, quoting the output from its start


def test_an_upstream_parse_failure_quoting_a_valid_call_is_read_as_the_answer():
    the_plan = plan(auto=True)
    step, state = first(the_plan)
    quoted = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    verdict = judge_error(the_plan, state, step, upstream_error(500, PARSE_FAILURE + quoted), 1)
    assert isinstance(verdict, Accept) and verdict.lesson == Lesson("upstream_parse_failure")
    assert verdict.message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert verdict.omens[0].fields["repairs"][0] == READ_FROM_ERROR


def test_an_upstream_parse_failure_without_a_readable_quote_falls_back_to_prompted_in_auto_mode():
    the_plan = plan(auto=True)
    step, state = first(the_plan)
    failure = upstream_error(500, "Failed to parse input at pos 12: garbage")  # not from the start: no quote
    verdict = judge_error(the_plan, state, step, failure, 1)
    assert isinstance(verdict, FallBack) and verdict.lesson == Lesson("upstream_parse_failure")
    assert verdict.state.mode == "prompted" and verdict.state.turns == ()
    assert [o.type for o in verdict.omens] == [om.OmenType.FALLBACK]
    again, _ = next_round(the_plan, verdict.state, 1)
    assert "tools" not in again.body  # the request, prompted
    fixed = judge_error(plan(), state, step, failure, 1)  # not auto: the error as it came
    assert isinstance(fixed, Fail) and fixed.error is failure


def test_tools_refused_by_the_upstream_fall_back_for_good():
    the_plan = plan(auto=True)
    step, state = first(the_plan)
    verdict = judge_error(the_plan, state, step, upstream_error(400, "registry.ollama.ai/library/gemma does not "
                                                                "support tools"), 1)
    assert isinstance(verdict, FallBack) and verdict.lesson == Lesson("tools_rejected")


def test_an_unreachable_upstream_is_raised_as_it_is():
    the_plan = plan(auto=True)
    step, state = first(the_plan)
    error = UpstreamUnreachable("connection refused")
    verdict = judge_error(the_plan, state, step, error, 1)
    assert isinstance(verdict, Fail) and verdict.error is error


# A copied example hint (the prompts show `<string>` where a call is required): a problem, not a value

def test_a_call_holding_the_examples_hint_is_corrected_where_a_call_is_required():
    the_plan = plan(mode="prompted", body={"tool_choice": "required"})
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, hermes("get_time", {"city": "<string>"}), 1)
    assert isinstance(verdict, Correct), verdict
    assert "'city' (<string>) is the example's placeholder" in verdict.state.turns[-1]["content"]
    assert verdict.state.kept == ()  # the copied call is not kept beside the corrected one


def test_a_hinted_call_beside_a_real_one_keeps_the_real_one():
    the_plan = plan(mode="prompted", body={"tool_choice": "required"})
    step, state = first(the_plan)
    answer = text('<tool_call>{"name": "get_time", "arguments": {"city": "Oslo"}}</tool_call>'
                  '<tool_call>{"name": "get_weather", "arguments": {"city": "<string>"}}</tool_call>')
    verdict = judge(the_plan, state, step, answer, 1)
    assert isinstance(verdict, Correct), verdict
    assert [c.name for c in verdict.state.kept] == ["get_time"]


def test_a_native_call_holding_hint_like_text_is_a_value():
    the_plan = plan(body={"tool_choice": "required"})  # native: no example was shown, the text is the client's business
    step, state = first(the_plan)
    verdict = judge(the_plan, state, step, native_call("get_time", '{"city": "<string>"}'), 1)
    assert isinstance(verdict, Accept)


def test_a_hint_nested_in_an_argument_names_that_argument():
    from sanctum_proxy.core.calls import Assessment, ToolCall
    from sanctum_proxy.repair.answers import without_copied_hints
    call = ToolCall("call_1", "book", '{"city": "Oslo", "guest": {"name": "<string>"}}')
    after = without_copied_hints(Assessment(calls=(call,), content=None))
    assert after.calls == () and after.problems[0].reason == "invalid_arguments"
    assert after.problems[0].details[0].startswith("argument 'guest' (<string>) is the example's placeholder")
