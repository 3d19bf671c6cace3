"""The round loop: one client request, 1 + N upstream rounds, tier 2 corrections and tier 3 surrender.

`run` does I/O only through its `Sender`; `next_round` and `judge` are pure. Each round ends in a Verdict:

    Accept       no tools, text, a refusal, or calls passing tier 1     Final.
    Correct      problems within max_rounds                             ASK with the correction.
    AskForText   a broken or made-up free-choice call, a repeat,        TEXT: no tools.
                 calls against tool_choice "none"
    AskForMore   follow_up_calls: a novel constrained call              MORE: one more call.
    FallBack     auto mode: native tools refused, unparsed or empty     ASK prompted.
    Unconstrain  a constraint refused                                   The round unconstrained.
    Surrender    problems past max_rounds, a rejected text twice        422, or the text.
    Fail         any other error                                        Raised.

Phase: WAITING -> CONSTRAINING at the first constrained round, any -> REFUSED.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Literal

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Assessment, Problem, ToolCall
from sanctum_proxy.core.offload import heavy_answer, heavy_round, off_loop_if, offloaded
from sanctum_proxy.core.shapes import ChatMessage, Usage
from sanctum_proxy.errors import ProxyError, ToolCallParseError, UpstreamError
from sanctum_proxy.repair import answers, round_body
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.answers import accepted_omens, client_message, finish, outcome, passed, read_quote, unechoed
from sanctum_proxy.repair.grounding import made_up
from sanctum_proxy.repair.loop_data import (
    Accept,
    Answer,
    AskForMore,
    AskForText,
    Correct,
    Event,
    Fail,
    FallBack,
    Final,
    Kind,
    Lesson,
    Phase,
    Plan,
    Round,
    RoundRecord,
    Sender,
    State,
    Surrender,
    Unconstrain,
    Verdict,
    added,
)
from sanctum_proxy.repair.round_body import upstream_body
from sanctum_proxy.repair.upstream_errors import classify, context_exceeded


async def run(plan: Plan, send: Sender) -> AsyncIterator[Event]:
    """Send rounds until an Accept, a Surrender or an error."""
    state = State(plan.mode)
    omens: list[om.Omen] = []
    usage: Usage | None = None
    shown = False  # after live text, rounds stay hidden
    number = 0
    for omen in plan.opening_omens:
        omens.append(omen)
        yield omen
    while True:
        step, state = await off_loop_if(heavy_round(plan), next_round, plan, state, number)
        number += 1
        record = RoundRecord(number, state.mode, step.body, 0.0, constrained=step.constraint is not None,
                             free_choice=step.free_choice)
        yield record  # a cut request still leaves a trace
        answer: Answer | None = None
        error: ProxyError | None = None
        start = time.perf_counter()
        try:
            async for event in send(step.body, live=not state.turns and not shown):
                if isinstance(event, Answer):
                    answer = event
                else:
                    shown = shown or bool(event.text)
                    yield event
        except ProxyError as caught:
            error = caught
        latency_ms = (time.perf_counter() - start) * 1000
        if error is not None:
            verdict = await offloaded(judge_error, plan, state, step, error, number)
            record = replace(record, latency_ms=latency_ms, outcome=verdict.outcome,
                             error={**error.body()["error"], "status": error.status})
        else:
            assert answer is not None, "a sender ends every round with an Answer"
            judged, verdict = await off_loop_if(heavy_answer(plan, answer), _judged, plan, state, step, answer, number)
            record = replace(record, latency_ms=latency_ms, outcome=verdict.outcome, answer=judged.message,
                             finish_reason=judged.finish_reason, usage=judged.usage, meta=answer.meta)
            usage = added(usage, judged.usage)
        yield record
        for item in verdict.omens:
            omens.append(item)
            yield item
        if isinstance(verdict, (FallBack, Unconstrain, Accept)) and verdict.lesson is not None:
            yield verdict.lesson
        if isinstance(verdict, Fail):
            raise verdict.error
        if isinstance(verdict, Surrender):
            raise ToolCallParseError(verdict.message, rounds=number, rejected=list(verdict.rejected))
        if isinstance(verdict, Accept):
            answer = verdict.answer
            yield Final(verdict.message, verdict.finish_reason, usage, state.mode, number, omens,
                        answer.meta, outcome(omens, verdict.surrendered), answer.extra, answer.choice_extra,
                        record.answer)
            return
        state = verdict.state


def next_round(plan: Plan, state: State, sent: int) -> tuple[Round, State]:
    """The next round and the state once sent; ToolCallParseError past the limit."""
    if sent > plan.max_rounds + 2:  # 1 + N rounds, one fallback, one unconstrained retry
        raise ToolCallParseError("spell call could not be repaired: round limit reached",
                                  rounds=sent, rejected=list(state.rejected))
    if state.kind is Kind.TEXT:
        body = upstream_body(plan, state.mode, list(state.closing), None, tools=False)
        return Round(body, None, False), state
    if state.kind is Kind.MORE:
        assert plan.book is not None
        more = cn.Constraint(plan.book, text=False, parallel=False, prompt=(plan.book, True, plan.parallel))
        return Round(upstream_body(plan, state.mode, list(state.turns), more), more, False), state
    constraint = _constraint(plan, state)
    if constraint is not None and state.phase is Phase.WAITING:
        state = replace(state, phase=Phase.CONSTRAINING, grammar_from=len(state.turns))
    constrained_from = state.grammar_from if state.phase is Phase.CONSTRAINING else None
    body = upstream_body(plan, state.mode, cn.transcript(state.turns, constraint, constrained_from), constraint)
    free = constraint is not None and constraint.text and not state.turns
    return Round(body, constraint, free), state


def _constraint(plan: Plan, state: State) -> cn.Constraint | None:
    stage = cn.Stage(state.mode, bool(state.turns), state.pin, state.fresh, state.phase is Phase.REFUSED)
    return cn.chosen(plan, stage)


def _judged(plan: Plan, state: State, step: Round, answer: Answer, number: int) -> tuple[Answer, Verdict]:
    answer = cn.decoded(answer, step.constraint, plan)
    return answer, judge(plan, state, step, answer, number)


def judge_error(plan: Plan, state: State, step: Round, error: ProxyError, number: int) -> Verdict:
    """The Verdict on a failed round."""
    if state.kind is Kind.MORE and state.held is not None:
        return Accept(state.held.message, state.held.finish_reason, state.held.answer)
    if not isinstance(error, UpstreamError):
        return Fail(error)
    if step.constraint is not None and step.constraint.how == "tool_choice" and cn.tool_choice_refused(error):
        return Unconstrain(replace(state, phase=Phase.REFUSED), Lesson("tool_choice_refused", "tool_choice"))
    if step.constraint is not None and cn.schema_refused(error):
        return Unconstrain(replace(state, phase=Phase.REFUSED), Lesson("schema_refused", step.constraint.how))
    if state.kind is Kind.ASK and state.turns and context_exceeded(error, step.body):
        return _too_long(plan, state, number)
    verdict = classify(error, step.body)  # ignoring the request it quotes
    if verdict == "upstream_parse_failure":
        read = read_quote(plan, error, state.kept, number) if state.kind is Kind.ASK else None
        if read is not None:
            lesson = Lesson("upstream_parse_failure") if plan.auto and state.mode == "native" else None
            return Accept(read.message, "tool_calls", read.answer, read.omens, lesson=lesson)
    fallback = _fall_back(plan, state, verdict, error.upstream_status, error.message, number)
    return fallback if fallback is not None else Fail(error)


def _too_long(plan: Plan, state: State, number: int) -> Correct | Accept | Surrender:
    """A correction over the upstream's context: once without transcript, else a surrender."""
    if not state.fresh and plan.correction_context != "fresh":
        fresh = replace(state, fresh=True, phase=Phase.CONSTRAINING, grammar_from=len(state.turns))
        if _constraint(plan, fresh) is not None:
            return Correct(fresh, (), outcome=om.Outcome.TOO_LONG)
    last = state.rejected[-1] if state.rejected else ""
    answer = Answer({"role": "assistant", "content": last or None}, "stop", None, {})
    return _surrender(plan, state, answer, number, False, state.rejected, "the correction round exceeded the "
                      "upstream's context")


def judge(plan: Plan, state: State, step: Round, answer: Answer, number: int) -> Verdict:
    """The Verdict on an answer."""
    if step.constraint is None and answers.empty_tools_answer(plan, state.mode, answer):
        fallback = _fall_back(plan, state, "upstream_parse_failure", None,
                              "upstream returned an empty answer to a tools request", number)
        if fallback is not None:
            return fallback
    if state.kind is Kind.MORE:
        return _judge_more(plan, state, answer, number)
    forbidden = answers.forbidden_calls(plan, answer)
    if forbidden is not None:
        return _calls_not_allowed(plan, state, answer, forbidden, number)
    if plan.book is None or state.kind is Kind.TEXT or answers.refusal(answer.message):
        return Accept(unechoed(passed(answer.message), state.mode), answer.finish_reason or "stop", answer)
    assessment, broken, problems = answers.read_calls(plan, state.mode, step.constraint, answer, state.kept)
    # A broken or made-up free-choice call: the model meant text.
    unmeant = None
    if step.free_choice:
        unmeant = broken or (None if problems else made_up(plan.book, plan.body.get("messages"), assessment.calls))
    if unmeant is not None:
        sent = round_body.sent_answer_text(answer.message)
        text_round = replace(state, kind=Kind.TEXT, rejected=(*state.rejected, sent))
        return AskForText(text_round, (om.rejected(number, unmeant, round_body.ANSWERED_IN_TEXT),))
    repeat = answers.repeat(plan, assessment, answer) if not problems and not state.kept else None
    if repeat is not None:  # the result is already there: ask for text
        text = round_body.correction([repeat], plan.book)
        closing: tuple[ChatMessage, ...] = ({"role": "user", "content": text},)  # without the repeat
        text_round = replace(state, kind=Kind.TEXT, closing=closing, rejected=(*state.rejected, repeat.raw))
        return AskForText(text_round, (om.rejected(number, repeat, text),))
    if not problems:
        if state.kept:
            assessment = replace(assessment, calls=answers.joined(state.kept, assessment.calls))
        accept = Accept(unechoed(client_message(assessment, answer.message), state.mode),
                        finish(assessment, answer), answer, accepted_omens(number, assessment))
        if round_body.follows_up(plan, step.constraint, step.free_choice, len(assessment.calls), number):
            return AskForMore(_asked_for_more(state, accept, assessment.calls[0]), accept.omens)
        return accept
    # Partly bad: valid calls kept, bad ones corrected, or dropped when the kept ones suffice.
    kept = answers.joined(state.kept, assessment.calls)
    if kept and not plan.parallel and answers.allows(plan, kept):
        return _accept_kept(plan, state, assessment, answer, kept, problems, number)
    raw = round_body.rejected_answer_text(answer.message, plan.prompt_format)
    sent = round_body.sent_answer_text(answer.message)
    repeated = bool(state.rejected) and sent == state.rejected[-1]
    rejected = (*state.rejected, sent)
    if repeated or state.repair_rounds >= plan.max_rounds:
        if kept and answers.allows(plan, kept):
            return _accept_kept(plan, state, assessment, answer, kept, problems, number)
        return _surrender(plan, state, answer, number, repeated, rejected)
    repaired = tuple(om.repaired(number, r) for r in assessment.repairs)
    return _correct(plan, replace(state, kept=kept), problems, raw, rejected, number, repaired)


def _calls_not_allowed(plan: Plan, state: State, answer: Answer, assessment: Assessment,
                       number: int) -> AskForText | Accept:
    """Calls answering tool_choice "none": a native round is asked again without tools, else the calls go."""
    sent = round_body.sent_answer_text(answer.message)
    if state.kind is not Kind.TEXT and state.mode == "native" and plan.max_rounds > 0:
        names = {c.name for c in assessment.calls} | {p.tool for p in assessment.problems if p.tool}
        problem = Problem("calls_not_allowed", next(iter(names)) if len(names) == 1 else None,
                          ('tool_choice is "none": no call may be made',), sent)
        text_round = replace(state, kind=Kind.TEXT, rejected=(*state.rejected, sent))
        return AskForText(text_round, (om.rejected(number, problem, round_body.ANSWERED_IN_TEXT),))
    omens = [om.dropped(number, c.name, c.id, c.arguments, "tool_choice_none") for c in assessment.calls]
    omens += [om.dropped(number, p.tool, "", p.raw, "tool_choice_none") for p in assessment.problems]
    message = client_message(replace(assessment, calls=()), answer.message)
    reason = answer.finish_reason if answer.finish_reason not in (None, "tool_calls") else "stop"
    return Accept(unechoed(message, state.mode), str(reason), answer, tuple(omens))


def _accept_kept(plan: Plan, state: State, assessment: Assessment, answer: Answer, kept: tuple[ToolCall, ...],
                 problems: list[Problem], number: int) -> Accept:
    """The kept calls answer; each bad call is dropped with an omen."""
    calls = kept[:1] if not plan.parallel else kept
    omens = [om.repaired(number, r) for r in assessment.repairs]
    omens += [om.dropped(number, p.tool, "", p.raw, "unrepaired") for p in problems]
    omens += [om.dropped(number, c.name, c.id, c.arguments) for c in (*kept[len(calls):], *assessment.dropped)]
    message = client_message(replace(assessment, calls=calls), answer.message)
    return Accept(unechoed(message, state.mode), "tool_calls", answer, tuple(omens))


def _asked_for_more(state: State, held: Accept, call: ToolCall) -> State:
    return replace(state, kind=Kind.MORE, turns=(*state.turns, *round_body.next_call_turns(call)), held=held)


def _judge_more(plan: Plan, state: State, answer: Answer, number: int) -> Accept | AskForMore:
    """A novel valid call joins the held answer and asks for another, else the held answer."""
    held = state.held
    assert held is not None
    new, omens = round_body.next_call(plan, answer, number)
    calls = held.message.get("tool_calls") or []
    if new is None or not round_body.novel(plan, new, calls):
        return Accept(held.message, held.finish_reason, held.answer)
    grown = replace(held, message={**held.message, "tool_calls": [*calls, new.to_openai()]})
    if number <= plan.max_rounds:  # as with corrections
        return AskForMore(_asked_for_more(state, grown, new), omens)
    return Accept(grown.message, grown.finish_reason, grown.answer, omens)


def _correct(plan: Plan, state: State, problems: list[Problem], raw: str, rejected: tuple[str, ...],
             number: int, first: tuple[om.Omen, ...] = ()) -> Correct:
    assert plan.book is not None
    text = round_body.correction(problems, plan.book, [c.name for c in state.kept])
    turns: tuple[ChatMessage, ...] = (*state.turns, {"role": "assistant", "content": raw},
                                      {"role": "user", "content": text})
    after = replace(state, turns=turns, pin=round_body.pinned(problems, plan.book), rejected=rejected)
    # A JSON-prompt round drops earlier turns: claim no correction the model never read.
    following = _constraint(plan, after)
    dropped = after.phase is Phase.WAITING and following is not None and following.json_prompt
    return Correct(after, first + tuple(om.rejected(number, p, round_body.CONSTRAINED_INSTEAD if dropped else text)
                                        for p in problems))


def _surrender(plan: Plan, state: State, answer: Answer, number: int, repeated: bool,
               rejected: tuple[str, ...], why: str | None = None) -> Accept | Surrender:
    why = why or ("the model repeated a rejected call verbatim" if repeated
                  else f"no valid spell call after {state.repair_rounds} repair round(s)")
    message = f"spell call could not be repaired: {why}"
    if plan.on_surrender != "content":
        return Surrender(message, rejected)
    omen = om.surrendered(number, message, list(rejected))
    return Accept({"role": "assistant", "content": rejected[-1] or None}, "stop", answer, (omen,),
                  surrendered=True, outcome=om.Outcome.REJECTED)


def _fall_back(plan: Plan, state: State, verdict: str | None, status: int | None, message: str,
               number: int) -> FallBack | None:
    """Auto mode: this request goes prompted, with a Lesson."""
    if not plan.auto or state.mode != "native" or verdict is None or plan.book is None:
        return None
    reason: Literal["tools_rejected", "upstream_parse_failure"] = (
        "tools_rejected" if verdict == "tools_unsupported" else "upstream_parse_failure")
    omen = om.fallback(number, reason, status, message)
    return FallBack(replace(state, mode="prompted", turns=()), (omen,), Lesson(reason))
