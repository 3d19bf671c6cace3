"""The round loop: one client request, 1 + N upstream rounds, tier 2 corrections and tier 3 surrender.

`run` is a small driver over two pure steps, and the only part of the repair layer that does I/O (only
through the injected `Sender`):

    next_round(plan, state)        what the next round sends: mode, transcript, constraint, tools or not
    send it                        (the Sender: live deltas pass through, then the round's Answer or an error)
    judge / judge_error(...)       a Verdict: accept, correct, ask for text, fall back, unconstrain, surrender
    apply it                       yield the round's record, its omens and lessons, then the Final, a raise,
                                   or the next state

It yields events (events.py: live deltas, omens, lessons, round records, the Final); it writes nothing shared.
The state and the verdicts themselves (plain frozen data) are in verdicts.py.

One request's rounds (`State.kind` is what the next round is, `State.phase` where constraining stands):

    verdict        when                                                      next round / end
    -------------  --------------------------------------------------------  ------------------------------------
    Accept         no tools offered, a text round's answer, a refusal, or   Final
                   calls that pass tier 1 (clean or repaired)
    Correct        problems, under the round limit, not the rejected text    ASK + [rejected answer, correction];
                   again; or a correction round over the upstream's context  pinned to one tool when all problems
                   (once, where constraining is on: `_too_long`)             name the same known one; too long:
                                                                             the fresh round (no transcript)
    AskForText     a free-choice constrained round's call was broken or      TEXT: the conversation without tools
                   made up (grounding.py); or every call repeats one the     (+ the correction for a repeat); its
                   conversation already answered (repeats.py)                answer is accepted as it is
    AskForMore     follow_up_calls: a first free-choice constrained round    MORE: the first round's prompt +
                   made one call (parallel allowed); or a MORE round's call  [the call, NEXT_CALL], constrained
                   adds a value from the user's turns (novel), under the     to one call; a call that adds
                   round limit                                               nothing, text or an error: Accept
                                                                             of the calls held (State.held)
    FallBack       auto mode, native round: the upstream refused `tools`,    ASK prompted, transcript emptied;
                   could not parse the model's call, or answered empty       Lesson tools_rejected /
                                                                             upstream_parse_failure
    Unconstrain    a constrained round's schema, grammar or tool_choice      the same round unconstrained
                   was refused                                               (phase REFUSED); Lesson schema_refused
                                                                             / tool_choice_refused
    Surrender      problems again after max_rounds corrections, or the       SpellCallParseError (422); with
                   same rejected text twice in a row                         on_surrender "content" an Accept of
                                                                             that text instead (outcome surrendered)
    Fail           any other error                                           raised as it is

Constraining (`plan.constrain`, constraint.py: which constraint, which turns): WAITING -> CONSTRAINING when a
round is first constrained (a correction under "repair"; every prompted round under "always"), remembering how
many hidden turns came before it; any phase -> REFUSED when the upstream refuses the schema, grammar or
tool_choice.
`next_round` raises SpellCallParseError once max_rounds + 3 rounds were sent (1 + N, one fallback, one
unconstrained retry).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Literal

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Assessment, Problem, ToolCall
from sanctum_proxy.core.offload import off_loop_if, offloaded
from sanctum_proxy.core.shapes import ChatMessage, Usage
from sanctum_proxy.errors import ProxyError, ToolCallParseError, UpstreamError
from sanctum_proxy.repair import answer_checks as checks
from sanctum_proxy.repair import constraint as ct
from sanctum_proxy.repair import correct, follow_up
from sanctum_proxy.repair.client_message import accepted_omens, client_message, finish, outcome, passed, unechoed
from sanctum_proxy.repair.events import Answer, Event, Final, Lesson, RoundRecord, Sender
from sanctum_proxy.repair.grounding import made_up
from sanctum_proxy.repair.offloading import heavy_answer, heavy_round
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.quoted_calls import read_quote
from sanctum_proxy.repair.upstream_body import upstream_body
from sanctum_proxy.repair.upstream_errors import classify, context_exceeded
from sanctum_proxy.repair.usage import added
from sanctum_proxy.repair.verdicts import (
    Accept,
    AskForMore,
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
    Verdict,
)


async def run(plan: Plan, send: Sender) -> AsyncIterator[Event]:
    """The round loop (see the module docstring): rounds until an Accept, a raise or a surrender."""
    state = State(plan.mode)
    omens: list[om.Omen] = []
    usage: Usage | None = None
    shown = False  # live content reached the client: later rounds are hidden (no text twice)
    number = 0  # rounds sent
    for omen in plan.opening_omens:
        omens.append(omen)
        yield omen
    while True:
        step, state = await off_loop_if(heavy_round(plan), next_round, plan, state, number)
        number += 1
        record = RoundRecord(number, state.mode, step.body, 0.0, constrained=step.constraint is not None,
                             free_choice=step.free_choice)
        yield record  # as sent: a trace of a request cut short shows it (outcome "pending")
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
        except ProxyError as caught:  # unreachable, timed out or an error answer: this round's own record says so
            error = caught
        latency_ms = (time.perf_counter() - start) * 1000
        if error is not None:
            verdict = await offloaded(judge_error, plan, state, step, error, number)  # may read a quote
            record = replace(record, latency_ms=latency_ms, outcome=verdict.outcome,
                             error={**error.body()["error"], "status": error.status})
        else:
            assert answer is not None, "a sender ends every round with an Answer"
            judged, verdict = await off_loop_if(heavy_answer(plan, answer), _judged, plan, state, step, answer, number)
            record = replace(record, latency_ms=latency_ms, outcome=verdict.outcome, answer=judged.message,
                             finish_reason=judged.finish_reason, usage=judged.usage)
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
    """What the next round sends (and the state once it is sent); SpellCallParseError past the round limit."""
    if sent > plan.max_rounds + 2:  # 1 + N rounds, one fallback, one unconstrained retry
        raise ToolCallParseError("spell call could not be repaired: round limit reached",
                                  rounds=sent, rejected=list(state.rejected))
    if state.kind is Kind.TEXT:
        body = upstream_body(plan, state.mode, list(state.closing), None, tools=False)
        return Round(body, None, False), state
    if state.kind is Kind.MORE:  # the first round's prompt; one call, kept only when it adds something
        assert plan.book is not None
        more = ct.Constraint(plan.book, text=False, parallel=False, prompt=(plan.book, True, plan.parallel))
        return Round(upstream_body(plan, state.mode, list(state.turns), more), more, False), state
    constraint = _constraint(plan, state)
    if constraint is not None and state.phase is Phase.WAITING:
        state = replace(state, phase=Phase.CONSTRAINING, grammar_from=len(state.turns))
    constrained_from = state.grammar_from if state.phase is Phase.CONSTRAINING else None
    body = upstream_body(plan, state.mode, ct.transcript(state.turns, constraint, constrained_from), constraint)
    free = constraint is not None and constraint.text and not state.turns
    return Round(body, constraint, free), state


def _constraint(plan: Plan, state: State) -> ct.Constraint | None:
    """The constraint of the round `state` stands before (constraint.chosen)."""
    stage = ct.Stage(state.mode, bool(state.turns), state.pin, state.fresh, state.phase is Phase.REFUSED)
    return ct.chosen(plan, stage)


def _judged(plan: Plan, state: State, step: Round, answer: Answer, number: int) -> tuple[Answer, Verdict]:
    answer = ct.decoded(answer, step.constraint, plan)
    return answer, judge(plan, state, step, answer, number)


def judge_error(plan: Plan, state: State, step: Round, error: ProxyError, number: int) -> Verdict:
    """A round that ended in an error: the same round unconstrained, a fallback to prompted, or the error. A MORE
    round's error ends the follow-ups: the calls held so far are the answer."""
    if state.kind is Kind.MORE and state.held is not None:
        return Accept(state.held.message, state.held.finish_reason, state.held.answer)
    if not isinstance(error, UpstreamError):
        return Fail(error)
    if step.constraint is not None and step.constraint.how == "tool_choice" and ct.tool_choice_refused(error):
        return Unconstrain(replace(state, phase=Phase.REFUSED), Lesson("tool_choice_refused"))
    if step.constraint is not None and ct.schema_refused(error):
        return Unconstrain(replace(state, phase=Phase.REFUSED))
    if state.kind is Kind.ASK and state.turns and context_exceeded(error, step.body):
        return _too_long(plan, state, number)
    verdict = classify(error, step.body)  # the upstream's own words only (a quote of the request is not)
    if verdict == "upstream_parse_failure":
        read = read_quote(plan, error, state.kept, number) if state.kind is Kind.ASK else None
        if read is not None:
            lesson = Lesson("upstream_parse_failure") if plan.auto and state.mode == "native" else None
            return Accept(read.message, "tool_calls", read.answer, read.omens, lesson=lesson)
    fallback = _fall_back(plan, state, verdict, error.upstream_status, error.message, number)
    return fallback if fallback is not None else Fail(error)


def _too_long(plan: Plan, state: State, number: int) -> Correct | Accept | Surrender:
    """A correction round the upstream refused as longer than its context (the client's own request fit: a long
    rejected answer and its correction made it too long). Once, where constraining is on: the correction again
    as the fresh round (the JSON prompt and answer schema, without the transcript); else the request surrenders
    (`on_surrender`), never an error the client's request did not cause."""
    if not state.fresh and plan.correction_context != "fresh":
        fresh = replace(state, fresh=True, phase=Phase.CONSTRAINING, grammar_from=len(state.turns))
        if _constraint(plan, fresh) is not None:
            return Correct(fresh, (), outcome="too_long")
    last = state.rejected[-1] if state.rejected else ""
    answer = Answer({"role": "assistant", "content": last or None}, "stop", None, {})
    return _surrender(plan, state, answer, number, False, state.rejected, "the correction round exceeded the "
                      "upstream's context")


def judge(plan: Plan, state: State, step: Round, answer: Answer, number: int) -> Verdict:
    """Accept the answer, bounce it with a correction, ask for text, fall back, or surrender."""
    if step.constraint is None and checks.empty_tools_answer(plan, state.mode, answer):
        fallback = _fall_back(plan, state, "upstream_parse_failure", None,
                              "upstream returned an empty answer to a tools request", number)
        if fallback is not None:
            return fallback
    if state.kind is Kind.MORE:
        return _judge_more(plan, state, answer, number)
    if plan.book is None or state.kind is Kind.TEXT or checks.refusal(answer.message):
        # no tools, the text round's answer, or a refusal: an answer, passed through as it came (less the
        # tool-result tags of a prompted history, echoed)
        return Accept(unechoed(passed(answer.message), state.mode), answer.finish_reason or "stop", answer)
    assessment, broken, problems = checks.read_calls(plan, state.mode, step.constraint, answer, state.kept)
    # The grammar made the model choose between text and a call, and it began a call it could not finish
    # (a string looping until max_tokens, which the same grammar would only repeat) or filled one with values
    # nobody gave: the request is asked again without tools, and that text is the answer. (After a call
    # attempt of its own was bounced, the model meant to call: its calls are judged as usual.)
    unmeant = None
    if step.free_choice:
        unmeant = broken or (None if problems else made_up(plan.book, plan.body.get("messages"), assessment.calls))
    if unmeant is not None:
        sent = correct.sent_answer_text(answer.message)  # what the model sent: a surrender's `rejected` (issue 20)
        text_round = replace(state, kind=Kind.TEXT, rejected=(*state.rejected, sent))
        return AskForText(text_round, (om.rejected(number, unmeant, correct.ANSWERED_IN_TEXT),))
    repeat = checks.repeat(plan, assessment, answer) if not problems and not state.kept else None
    if repeat is not None:  # an answered call again: the result is there, the request is asked for text
        text = correct.correction([repeat], plan.book)
        closing: tuple[ChatMessage, ...] = ({"role": "user", "content": text},)  # without the repeat: see repeats.py
        text_round = replace(state, kind=Kind.TEXT, closing=closing, rejected=(*state.rejected, repeat.raw))
        return AskForText(text_round, (om.rejected(number, repeat, text),))
    if not problems:
        if state.kept:  # the correction of a partly bad answer: its calls join those kept
            assessment = replace(assessment, calls=checks.joined(state.kept, assessment.calls))
        accept = Accept(unechoed(client_message(assessment, answer.message), state.mode),
                        finish(assessment, answer), answer, accepted_omens(number, assessment))
        if follow_up.follows_up(plan, step.constraint, step.free_choice, len(assessment.calls), number):
            return AskForMore(_asked_for_more(state, accept, assessment.calls[0]), accept.omens)
        return accept
    # A partly bad answer: its valid calls are kept, and only the bad ones are corrected (or, where the request
    # takes one call, or the rounds ran out, left out with an omen, when the kept calls still do what it asks)
    kept = checks.joined(state.kept, assessment.calls)
    if kept and not plan.parallel and checks.allows(plan, kept):
        return _accept_kept(plan, state, assessment, answer, kept, problems, number)
    raw = correct.rejected_answer_text(answer.message, plan.prompt_format)  # quoted back in the prompt format
    sent = correct.sent_answer_text(answer.message)
    repeated = bool(state.rejected) and sent == state.rejected[-1]
    rejected = (*state.rejected, sent)
    if repeated or state.repair_rounds >= plan.max_rounds:
        if kept and checks.allows(plan, kept):
            return _accept_kept(plan, state, assessment, answer, kept, problems, number)
        return _surrender(plan, state, answer, number, repeated, rejected)
    repaired = tuple(om.repaired(number, r) for r in assessment.repairs)  # of the calls kept
    return _correct(plan, replace(state, kept=kept), problems, raw, rejected, number, repaired)


def _accept_kept(plan: Plan, state: State, assessment: Assessment, answer: Answer, kept: tuple[ToolCall, ...],
                 problems: list[Problem], number: int) -> Accept:
    """The kept calls are the answer; each call still bad is left out (SpellCallsDropped, reason unrepaired)."""
    calls = kept[:1] if not plan.parallel else kept
    omens = [om.repaired(number, r) for r in assessment.repairs]
    omens += [om.dropped(number, p.tool, "", p.raw, "unrepaired") for p in problems]
    omens += [om.dropped(number, c.name, c.id, c.arguments) for c in (*kept[len(calls):], *assessment.dropped)]
    message = client_message(replace(assessment, calls=calls), answer.message)
    return Accept(unechoed(message, state.mode), "tool_calls", answer, tuple(omens))


def _asked_for_more(state: State, held: Accept, call: ToolCall) -> State:
    return replace(state, kind=Kind.MORE, turns=(*state.turns, *follow_up.next_call_turns(call)), held=held)


def _judge_more(plan: Plan, state: State, answer: Answer, number: int) -> Accept | AskForMore:
    """A MORE round: a new call (valid, with a value from the conversation that no held call has:
    follow_up.novel) joins the held answer, and one more is asked for while the round limit allows; a call that
    adds nothing, a broken one, or text (an upstream that ignored the schema): the held answer, as it was."""
    held = state.held
    assert held is not None
    new, omens = follow_up.next_call(plan, answer, number)
    calls = held.message.get("tool_calls") or []  # the proxy's own (client_message)
    if new is None or not follow_up.novel(plan, new, calls):
        return Accept(held.message, held.finish_reason, held.answer)
    grown = replace(held, message={**held.message, "tool_calls": [*calls, new.to_openai()]})
    if number <= plan.max_rounds:  # 1 + max_rounds rounds, as with corrections
        return AskForMore(_asked_for_more(state, grown, new), omens)
    return Accept(grown.message, grown.finish_reason, grown.answer, omens)


def _correct(plan: Plan, state: State, problems: list[Problem], raw: str, rejected: tuple[str, ...],
             number: int, first: tuple[om.Omen, ...] = ()) -> Correct:
    assert plan.book is not None
    text = correct.correction(problems, plan.book, [c.name for c in state.kept])
    turns: tuple[ChatMessage, ...] = (*state.turns, {"role": "assistant", "content": raw},
                                      {"role": "user", "content": text})
    after = replace(state, turns=turns, pin=correct.pinned(problems, plan.book), rejected=rejected)
    # A first JSON-prompt round is sent without the turns before it (constraint.transcript): say so, never
    # claim a correction the model did not read.
    following = _constraint(plan, after)
    dropped = after.phase is Phase.WAITING and following is not None and following.json_prompt
    return Correct(after, first + tuple(om.rejected(number, p, correct.CONSTRAINED_INSTEAD if dropped else text)
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
                  surrendered=True, outcome="rejected")


def _fall_back(plan: Plan, state: State, verdict: str | None, status: int | None, message: str,
               number: int) -> FallBack | None:
    """Auto mode only: answer this request prompted; the Lesson tells the caller to remember it."""
    if not plan.auto or state.mode != "native" or verdict is None or plan.book is None:
        return None
    reason: Literal["tools_rejected", "upstream_parse_failure"] = (
        "tools_rejected" if verdict == "tools_unsupported" else "upstream_parse_failure")
    omen = om.fallback(number, reason, status, message)
    return FallBack(replace(state, mode="prompted", turns=()), (omen,), Lesson(reason))
