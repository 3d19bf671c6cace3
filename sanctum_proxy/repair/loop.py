"""The round loop: one client request, 1 + N upstream rounds, tier 2 corrections and tier 3 surrender.

`run` is a small driver over two pure steps, and the only part of the repair layer that does I/O (only
through the injected `Sender`):

    next_round(plan, state)        what the next round sends: mode, transcript, constraint, tools or not
    send it                        (the Sender: live deltas pass through, then the round's Answer or an error)
    judge / judge_error(...)       a Verdict: accept, correct, ask for text, fall back, unconstrain, surrender
    apply it                       yield its omens and lessons, then the Final, a raise, or the next state

It yields events; it writes nothing shared:

    ContentDelta   text the client may see now (streaming: only the first round that shows any; the
                   accepted answer of a hidden round comes whole in the Final)
    FieldDelta     reasoning / refusal text of a live round
    om.Omen        an omen, when it happens (a writer sends it with its next event); every omen is in the
                   Final too, and the recorder keeps them when a surrender raises
    Lesson         what the caller should remember about the upstream (auto-mode fallback, refused schema)
    Final          the answer: the message for the client, usage summed over rounds, every omen

One request's rounds (`State.kind` is what the next round is, `State.phase` where constraining stands):

    verdict        when                                                      next round / end
    -------------  --------------------------------------------------------  ------------------------------------
    Accept         no tools offered, a text round's answer, a refusal, or   Final
                   calls that pass tier 1 (clean or repaired)
    Correct        problems, under the round limit, not the rejected text    ASK + [rejected answer, correction];
                   again                                                     pinned to one tool when all problems
                                                                             name the same known one
    AskForText     a free-choice constrained round's call was broken or      TEXT: the conversation without tools
                   made up (grounding.py); or every call repeats one the     (+ the correction for a repeat); its
                   conversation already answered (repeats.py)                answer is accepted as it is
    AskForMore     follow_up_calls: a first free-choice constrained round    MORE: the first round's prompt +
                   made one call (parallel allowed); or a MORE round's call  [the call, NEXT_CALL], constrained
                   adds a value from the user's turns (_novel), under the    to one call; a call that adds
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

Constraining (`plan.constrain`, `_constraint`): WAITING -> CONSTRAINING when a round is first constrained (a
correction under "repair"; every prompted round under "always"), remembering how many hidden turns came before
it; any phase -> REFUSED when the upstream refuses the schema, grammar or tool_choice. A correction round is
the first round's body byte for byte plus the new turns (so the upstream's prompt cache serves the prefix), on
every upstream, constrained by tool_choice "required" (native; a prompted round where the template drops the
tools), a GBNF grammar in the prompt's own format (llama.cpp) or the answer schema; only with
`correction_context = "fresh"` is it a JSON-prompt round without the turns before it (`_transcript`; its omen
says so).
`next_round` raises SpellCallParseError once max_rounds + 3 rounds were sent (1 + N, one fallback, one
unconstrained retry).
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal, Protocol

import orjson

from sanctum_proxy.codecs import families
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.calls import Assessment, Problem, Repair, ToolCall, content_text
from sanctum_proxy.core.offload import offloaded
from sanctum_proxy.errors import ProxyError, ToolCallParseError, UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.correct import correction, rejected_answer_text, sent_answer_text
from sanctum_proxy.repair.grammar import gbnf
from sanctum_proxy.repair.grounding import Evidence, ungrounded
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.repeats import repeated_call
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.upstream_errors import classify, context_exceeded, quoted_arguments, quoted_output

Mode = Literal["native", "prompted"]


@dataclass(frozen=True)
class ContentDelta:
    text: str
    meta: dict[str, Any] | None = None  # the live round's id, model, created, system_fingerprint, once known
    logprobs: dict[str, Any] | None = None  # the upstream's logprobs of the tokens this text came from


@dataclass(frozen=True)
class FieldDelta:
    """Text of a message field other than content that the client may see now, in the field it came in
    (`reasoning_content`, `reasoning`, `refusal`): never read for calls, never held back; live like ContentDelta."""

    text: str
    field: str = "reasoning_content"


@dataclass(frozen=True)
class Answer:
    """One upstream round's answer, however it arrived."""

    message: dict[str, Any]
    finish_reason: str | None
    usage: dict[str, Any] | None
    meta: dict[str, Any]  # id, model, created, system_fingerprint of the upstream response
    extra: dict[str, Any] = field(default_factory=dict)  # the response's other top-level fields, as sent
    choice_extra: dict[str, Any] = field(default_factory=dict)  # the choice's fields but index/message/finish


@dataclass(frozen=True)
class Lesson:
    """What a round taught about this (upstream, model), for the caller to keep (`plan.upstream`, `plan.model`):
    the loop keeps nothing between requests.

        tools_rejected          the upstream refused `tools`: the model goes prompted for good
        upstream_parse_failure  the upstream could not parse the model's own call: one failure counted
        schema_refused          the upstream refused the answer schema: stop constraining for this model
        tool_choice_refused     the upstream refused tool_choice "required": native corrections go without it
    """

    what: Literal["tools_rejected", "upstream_parse_failure", "schema_refused", "tool_choice_refused"]


class Sender(Protocol):
    def __call__(self, body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]: ...


@dataclass
class RoundRecord:
    number: int
    mode: Mode
    sent: dict[str, Any]
    latency_ms: float
    answer: dict[str, Any] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    outcome: str = "pending"  # accepted | rejected | fallback | error
    constrained: bool = False  # the round's decoding was constrained (answer schema, grammar or tool_choice)
    free_choice: bool = False  # ... offering text as well as calls, with no call attempt before it


@dataclass
class Final:
    message: dict[str, Any]
    finish_reason: str
    usage: dict[str, Any] | None
    mode: Mode
    rounds: int
    omens: list[om.Omen]
    meta: dict[str, Any]
    outcome: str  # clean | repaired | rejected | fallback | surrendered (the most telling one)
    extra: dict[str, Any] = field(default_factory=dict)  # the answering round's Answer.extra
    choice_extra: dict[str, Any] = field(default_factory=dict)  # ... and Answer.choice_extra


Event = ContentDelta | FieldDelta | om.Omen | Lesson | Final
# What a stream writer renders (routes/sse.py, protocols/*_events.py): the loop's events but the lessons, which
# stay at the edge (routes/rounds.py), and the error that ends a stream.
StreamItem = ContentDelta | FieldDelta | om.Omen | Final | ProxyError


@dataclass
class Plan:
    """What the loop needs to know about the request, settled before the first round."""

    body: dict[str, Any]
    book: Toolbox | None  # None: no tools offered
    mode: Mode
    auto: bool
    max_rounds: int
    on_surrender: str = "error"
    prompt_format: str = "hermes"
    upstream: str = ""
    new_id: Callable[[], str] | None = None
    records: list[RoundRecord] = field(default_factory=list)
    opening_omens: list[om.Omen] = field(default_factory=list)  # decided before the first round (a probe)
    constrain: cn.Constrain = "off"
    correction_context: Literal["transcript", "fresh"] = "transcript"  # fresh: JSON-prompt rounds, no transcript
    grammar: bool = False  # the upstream takes a GBNF `grammar` (llama.cpp): prompted corrections use one
    tool_choice: bool = True  # False: the upstream refused tool_choice "required" before (native corrections
    # then go unconstrained, with the transcript still)
    native_calls: bool | None = None  # the model's template takes tools (probed); False: it drops them (llama.cpp
    # --jinja, silently), so tool_choice holds nothing and a native correction round goes prompted instead
    max_repair_bytes: int = 64 * 1024  # call text longer than this is not mended locally (tier 2 instead)
    max_grammar_bytes: int = 1024 * 1024  # a larger grammar is not sent: the correction round goes unconstrained
    follow_up_calls: bool = False  # constrain "always": after one call, MORE rounds, one call each (_judge_more)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def parallel(self) -> bool:
        return self.body.get("parallel_tool_calls") is not False

    @property
    def required(self) -> str | None:
        """"any" for tool_choice required, a tool name for a named choice, else None."""
        choice = self.body.get("tool_choice")
        if choice == "required":
            return "any"
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None


async def run(plan: Plan, send: Sender) -> AsyncIterator[Event]:
    """The round loop (see the module docstring): rounds until an Accept, a raise or a surrender."""
    state = State(plan.mode)
    omens: list[om.Omen] = []
    usage: dict[str, Any] | None = None
    shown = False  # live content reached the client: later rounds are hidden (no text twice)
    for omen in plan.opening_omens:
        omens.append(omen)
        yield omen
    while True:
        if plan.book is not None and plan.book.schema_bytes > INLINE_SCHEMA_BYTES:  # a grammar, a prompt from them
            step, state = await offloaded(next_round, plan, state, len(plan.records))
        else:
            step, state = next_round(plan, state, len(plan.records))
        record = RoundRecord(len(plan.records) + 1, state.mode, step.body, 0.0,
                             constrained=step.constraint is not None, free_choice=step.free_choice)
        plan.records.append(record)
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
        record.latency_ms = (time.perf_counter() - start) * 1000
        if error is not None:
            record.error = {**error.body()["error"], "status": error.status}
            verdict = await offloaded(judge_error, plan, state, step, error, record.number)  # may read a quote
        else:
            assert answer is not None, "a sender ends every round with an Answer"
            if _heavy(plan, answer):  # off the event loop: a long answer, or a schema whose branches multiply
                judged, verdict = await offloaded(_judged, plan, state, step, answer, record.number)
            else:
                judged, verdict = _judged(plan, state, step, answer, record.number)
            record.answer, record.finish_reason, record.usage = judged.message, judged.finish_reason, judged.usage
            usage = _added(usage, judged.usage)
        record.outcome = verdict.outcome
        for item in verdict.omens:
            omens.append(item)
            yield item
        if isinstance(verdict, (FallBack, Unconstrain, Accept)) and verdict.lesson is not None:
            yield verdict.lesson
        if isinstance(verdict, Fail):
            raise verdict.error
        if isinstance(verdict, Surrender):
            raise ToolCallParseError(verdict.message, rounds=len(plan.records), rejected=list(verdict.rejected))
        if isinstance(verdict, Accept):
            yield _final(plan, verdict, state.mode, omens, usage)
            return
        state = verdict.state


class Kind(Enum):
    """What the next round is."""

    ASK = "ask"  # the request as its mode sends it (constrained or not), plus the hidden correction turns
    TEXT = "text"  # the conversation without tools (plus a closing turn): its answer is accepted as it is
    MORE = "more"  # follow_up_calls: the next call after those in `State.held` (constrained to one call)


class Phase(Enum):
    """Where constraining stands for this request."""

    WAITING = "waiting"  # no constrained round sent yet (or `constrain` is off: `_constraint` says None)
    CONSTRAINING = "constraining"  # constrained rounds since `State.grammar_from` hidden turns
    REFUSED = "refused"  # the upstream refused the answer schema: no more constrained rounds


@dataclass(frozen=True)
class State:
    """What the next round depends on: changed only by a verdict (`dataclasses.replace`)."""

    mode: Mode
    kind: Kind = Kind.ASK
    turns: tuple[dict[str, Any], ...] = ()  # hidden correction turns so far (none: the round may be live)
    closing: tuple[dict[str, Any], ...] = ()  # TEXT: the turns the text round is sent after the conversation
    phase: Phase = Phase.WAITING
    grammar_from: int = 0  # CONSTRAINING: len(turns) when the first constrained round was sent
    pin: str | None = None  # the one known tool the last correction was about
    rejected: tuple[str, ...] = ()  # every rejected answer's text, in order
    held: Accept | None = None  # MORE: the answer so far (its calls), accepted when no other call comes
    kept: tuple[ToolCall, ...] = ()  # the valid calls of partly bad answers so far (their bad ones corrected)
    fresh: bool = False  # a correction with its transcript did not fit the context: fresh corrections from here

    @property
    def repair_rounds(self) -> int:
        return len(self.turns) // 2


@dataclass(frozen=True)
class Round:
    """One round as `next_round` settles it."""

    body: dict[str, Any]
    constraint: Constraint | None
    free_choice: bool  # constrained, offering text as well as calls, with no call attempt before it


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
        more = Constraint(plan.book, text=False, parallel=False, prompt=(plan.book, True, plan.parallel))
        return Round(upstream_body(plan, state.mode, list(state.turns), more), more, False), state
    constraint = _constraint(plan, state)
    if constraint is not None and state.phase is Phase.WAITING:
        state = replace(state, phase=Phase.CONSTRAINING, grammar_from=len(state.turns))
    body = upstream_body(plan, state.mode, _transcript(state, constraint), constraint)
    free = constraint is not None and constraint.text and not state.turns
    return Round(body, constraint, free), state


# Verdicts: what a round's answer (or error) means, and the state of the round after it.

@dataclass(frozen=True)
class Accept:
    """The answer: the message for the client."""

    message: dict[str, Any]
    finish_reason: str
    answer: Answer
    omens: tuple[om.Omen, ...] = ()
    surrendered: bool = False  # on_surrender "content": the last rejected answer as text
    outcome: str = "accepted"
    lesson: Lesson | None = None  # the calls were read from an upstream parse failure's quote (still one failure)


@dataclass(frozen=True)
class Correct:
    """Bounced with a correction; `state` carries the turns for the next round."""

    state: State
    omens: tuple[om.Omen, ...]
    outcome: str = "rejected"


@dataclass(frozen=True)
class AskForText:
    """The call was not meant (made up, broken under free choice, or already answered): ask for text."""

    state: State
    omens: tuple[om.Omen, ...]
    outcome: str = "rejected"


@dataclass(frozen=True)
class FallBack:
    """Auto mode: this request goes prompted."""

    state: State
    omens: tuple[om.Omen, ...]
    lesson: Lesson | None
    outcome: str = "fallback"


@dataclass(frozen=True)
class Unconstrain:
    """The upstream refused the answer schema: the round again without it."""

    state: State
    lesson: Lesson | None = Lesson("schema_refused")
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "fallback"


@dataclass(frozen=True)
class Surrender:
    """No valid call: SpellCallParseError (422)."""

    message: str
    rejected: tuple[str, ...]
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "rejected"


@dataclass(frozen=True)
class Fail:
    """An error no verdict turns into another round: raised as it is."""

    error: ProxyError
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "error"


@dataclass(frozen=True)
class AskForMore:
    """follow_up_calls: the calls so far are held in `state`; the next round asks for the next call."""

    state: State
    omens: tuple[om.Omen, ...] = ()
    outcome: str = "accepted"


Verdict = Accept | Correct | AskForText | AskForMore | FallBack | Unconstrain | Surrender | Fail


INLINE_ANSWER_CHARS = 4096  # a longer answer is judged off the event loop (core/offload.py)
INLINE_SCHEMA_BYTES = 64 * 1024  # rounds for tools with longer schemas are built there too
INLINE_CHECKED_SCHEMA_BYTES = 4096  # ... and answers to tools with longer schemas are judged there


def _judged(plan: Plan, state: State, step: Round, answer: Answer, number: int) -> tuple[Answer, Verdict]:
    answer = _decoded(answer, step, plan)
    return answer, judge(plan, state, step, answer, number)


def _heavy(plan: Plan, answer: Answer) -> bool:
    """Whether judging this answer may take more than a few milliseconds: a long answer (lenient JSON, codec
    scans), or tools whose schemas branch (validation walks their branches, within validate.MAX_STEPS)."""
    if plan.book is None:
        return False
    message = answer.message if isinstance(answer.message, dict) else {}
    size = len(message.get("content") or "") if isinstance(message.get("content"), str) else 0
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        size += len(arguments) if isinstance(arguments, str) else INLINE_ANSWER_CHARS
    if size > INLINE_ANSWER_CHARS or not isinstance(message.get("content"), str | None):
        return True
    # a first check against a long schema compiles it (its meta-schema check: about 6 µs a byte)
    return plan.book.schema_bytes > INLINE_CHECKED_SCHEMA_BYTES or plan.book.branching  # (a walk: small books only)


def judge_error(plan: Plan, state: State, step: Round, error: ProxyError, number: int) -> Verdict:
    """A round that ended in an error: the same round unconstrained, a fallback to prompted, or the error. A MORE
    round's error ends the follow-ups: the calls held so far are the answer."""
    if state.kind is Kind.MORE and state.held is not None:
        return Accept(state.held.message, state.held.finish_reason, state.held.answer)
    if not isinstance(error, UpstreamError):
        return Fail(error)
    if step.constraint is not None and step.constraint.how == "tool_choice" and _tool_choice_refused(error):
        return Unconstrain(replace(state, phase=Phase.REFUSED), Lesson("tool_choice_refused"))
    if step.constraint is not None and _schema_refused(error):
        return Unconstrain(replace(state, phase=Phase.REFUSED))
    if state.kind is Kind.ASK and state.turns and context_exceeded(error, step.body):
        return _too_long(plan, state, number)
    verdict = classify(error, step.body)  # the upstream's own words only (a quote of the request is not)
    if verdict == "upstream_parse_failure":
        read = _read_quote(plan, state, error, number)
        if read is not None:
            return read
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


READ_FROM_ERROR = "read_from_upstream_error"
ONLY_TOOL = "name_of_the_only_tool"  # Ollama's harmony error quotes the arguments alone
# Mends that close what the output left open: in a quote they may be where the quote (not the model) stopped.
_CLOSING = frozenset({"unclosed_braces", "unclosed_tag", "unclosed_at_end"})


def _read_quote(plan: Plan, state: State, error: UpstreamError, number: int) -> Accept | None:
    """The calls of the model's output that an upstream parse failure quotes whole (upstream_errors.quoted_output),
    read by tier 1 as if the upstream had answered it as content: valid or locally mended calls are the answer,
    with no other round (each call's SpellCallRepaired omen says `read_from_upstream_error`). Ollama's harmony
    error quotes a call's arguments without its name: read only when one tool is offered (`name_of_the_only_tool`).
    None (ask again) when there is no whole quote, it holds no call, a call needs tier 2, or a mend closed what
    the quote left open (the quote may have stopped there, not the model)."""
    if plan.book is None or state.kind is not Kind.ASK:
        return None
    quote, arguments = quoted_output(error), quoted_arguments(error)
    only = next(iter(plan.book.tools)) if len(plan.book.tools) == 1 else None
    if quote is not None:
        sent: dict[str, Any] = {"role": "assistant", "content": quote}
    elif arguments is not None and only is not None:  # the name is not quoted: the one tool offered is the one
        sent = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "", "type": "function", "function": {"name": only, "arguments": arguments}}]}
    else:
        return None
    kwargs = {"new_id": plan.new_id} if plan.new_id else {}
    assessment = assess(sent, plan.book, finish_reason="length", parallel_tool_calls=plan.parallel,
                        max_repair_chars=plan.max_repair_bytes, asked_format=None,
                        client_json=cn.asks_json(plan.body), **kwargs)
    answer = Answer(sent, "tool_calls", None, {})
    mends = {m for r in assessment.repairs for m in r.repairs}
    if (not assessment.calls or assessment.problems or mends & _CLOSING
            or _missing_call(plan, assessment, answer, state)):
        return None
    read = (READ_FROM_ERROR,) if quote is not None else (READ_FROM_ERROR, ONLY_TOOL)
    repairs = assessment.repairs or tuple(Repair(c.name, c.id, (), c.arguments) for c in assessment.calls)
    omens = [om.repaired(number, replace(r, repairs=(*read, *r.repairs))) for r in repairs]
    omens += [om.dropped(number, c.name, c.id, c.arguments) for c in assessment.dropped]
    omens += [om.dropped(number, c.name, c.id, c.arguments, "duplicate_call") for c in assessment.duplicates]
    message = _client_message(assessment, sent)
    lesson = Lesson("upstream_parse_failure") if plan.auto and state.mode == "native" else None
    return Accept(message, "tool_calls", answer, tuple(omens), lesson=lesson)


def judge(plan: Plan, state: State, step: Round, answer: Answer, number: int) -> Verdict:
    """Accept the answer, bounce it with a correction, ask for text, fall back, or surrender."""
    if step.constraint is None and _empty_tools_answer(plan, state, answer):
        fallback = _fall_back(plan, state, "upstream_parse_failure", None,
                              "upstream returned an empty answer to a tools request", number)
        if fallback is not None:
            return fallback
    if state.kind is Kind.MORE:
        return _judge_more(plan, state, answer, number)
    if plan.book is None or state.kind is Kind.TEXT or _refusal(answer.message):
        # no tools, the text round's answer, or a refusal: an answer, passed through as it came (less the
        # tool-result tags of a prompted history, echoed)
        return Accept(_unechoed(answer.message, state.mode), answer.finish_reason or "stop", answer)
    kwargs = {"new_id": plan.new_id} if plan.new_id else {}
    answer_object = step.constraint is not None and step.constraint.answer_object
    sent_prompted = state.mode == "prompted" or step.constraint is not None and step.constraint.prompted
    asked = families.codec_of(plan.prompt_format) if sent_prompted and not answer_object else None
    assessment = assess(answer.message, plan.book, finish_reason=answer.finish_reason,
                        parallel_tool_calls=plan.parallel, max_repair_chars=plan.max_repair_bytes,
                        asked_format=asked, client_json=cn.asks_json(plan.body), **kwargs)
    broken = cn.broken_call(answer.message, answer.finish_reason) if answer_object else None
    problems = [broken] if broken else list(assessment.problems) or _missing_call(plan, assessment, answer, state)
    # The grammar made the model choose between text and a call, and it began a call it could not finish
    # (a string looping until max_tokens, which the same grammar would only repeat) or filled one with values
    # nobody gave: the request is asked again without tools, and that text is the answer. (After a call
    # attempt of its own was bounced, the model meant to call: its calls are judged as usual.)
    unmeant = (broken or (None if problems else _made_up(plan, assessment))) if step.free_choice else None
    if unmeant is not None:
        text_round = replace(state, kind=Kind.TEXT, rejected=(*state.rejected, sent_answer_text(answer.message)))
        return AskForText(text_round, (om.rejected(number, unmeant, ANSWERED_IN_TEXT),))
    repeat = _repeat(plan, assessment, answer) if not problems and not state.kept else None
    if repeat is not None:  # an answered call again: the result is there, the request is asked for text
        text = correction([repeat], plan.book)
        closing = ({"role": "user", "content": text},)  # without the repeat: see repeats.py
        text_round = replace(state, kind=Kind.TEXT, closing=closing, rejected=(*state.rejected, repeat.raw))
        return AskForText(text_round, (om.rejected(number, repeat, text),))
    if not problems:
        if state.kept:  # the correction of a partly bad answer: its calls join those kept
            assessment = replace(assessment, calls=_joined(state.kept, assessment.calls))
        omens = [om.repaired(number, r) for r in assessment.repairs]
        omens += [om.dropped(number, c.name, c.id, c.arguments) for c in assessment.dropped]
        omens += [om.dropped(number, c.name, c.id, c.arguments, "duplicate_call") for c in assessment.duplicates]
        accept = Accept(_unechoed(_client_message(assessment, answer.message), state.mode),
                        _finish(assessment, answer), answer, tuple(omens))
        if _follows_up(plan, step, assessment, number):
            return AskForMore(_asked_for_more(state, accept, assessment.calls[0]), accept.omens)
        return accept
    # A partly bad answer: its valid calls are kept, and only the bad ones are corrected (or, where the request
    # takes one call, or the rounds ran out, left out with an omen, when the kept calls still do what it asks)
    kept = _joined(state.kept, assessment.calls)
    if kept and not plan.parallel and _allows(plan, kept):
        return _accept_kept(plan, state, assessment, answer, kept, problems, number)
    raw = rejected_answer_text(answer.message, plan.prompt_format)  # quoted back in the prompt format
    sent = sent_answer_text(answer.message)  # what the model sent: a surrender's `rejected` (issue 20)
    repeated = bool(state.rejected) and sent == state.rejected[-1]
    rejected = (*state.rejected, sent)
    if repeated or state.repair_rounds >= plan.max_rounds:
        if kept and _allows(plan, kept):
            return _accept_kept(plan, state, assessment, answer, kept, problems, number)
        return _surrender(plan, state, answer, number, repeated, rejected)
    repaired = tuple(om.repaired(number, r) for r in assessment.repairs)  # of the calls kept
    return _correct(plan, replace(state, kept=kept), problems, raw, rejected, number, repaired)


def _joined(kept: tuple[ToolCall, ...], calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """The calls kept so far and a new answer's valid calls, a call equal to one kept (same name, same arguments
    as JSON) only once."""
    out = list(kept)
    seen = {_call_key(c) for c in kept}
    for call in calls:
        if _call_key(call) not in seen:
            seen.add(_call_key(call))
            out.append(call)
    return tuple(out)


def _call_key(call: ToolCall) -> tuple[str, str]:
    arguments = _loads(call.arguments)
    try:
        return call.name, orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return call.name, call.arguments


def _allows(plan: Plan, calls: tuple[ToolCall, ...]) -> bool:
    """Whether these calls alone answer the request as its tool_choice asks (a named tool: a call to it)."""
    required = plan.required
    return bool(calls) and (required in (None, "any") or any(c.name == required for c in calls))


def _accept_kept(plan: Plan, state: State, assessment: Assessment, answer: Answer, kept: tuple[ToolCall, ...],
                 problems: list[Problem], number: int) -> Accept:
    """The kept calls are the answer; each call still bad is left out (SpellCallsDropped, reason unrepaired)."""
    calls = kept[:1] if not plan.parallel else kept
    omens = [om.repaired(number, r) for r in assessment.repairs]
    omens += [om.dropped(number, p.tool, "", p.raw, "unrepaired") for p in problems]
    omens += [om.dropped(number, c.name, c.id, c.arguments) for c in (*kept[len(calls):], *assessment.dropped)]
    message = _client_message(replace(assessment, calls=calls), answer.message)
    return Accept(_unechoed(message, state.mode), "tool_calls", answer, tuple(omens))


NEXT_CALL = "Now make the next call the request asks for: other arguments, or another tool."


def _follows_up(plan: Plan, step: Round, assessment: Assessment, number: int) -> bool:
    """A first free-choice round under `constrain = "always"` made one call, parallel calls are allowed and
    the round limit (1 + max_rounds) leaves room: ask for another call (Kind.MORE) before answering."""
    return (plan.follow_up_calls and step.free_choice and step.constraint is not None
            and step.constraint.answer_object and plan.parallel and len(assessment.calls) == 1
            and number <= plan.max_rounds)


def _asked_for_more(state: State, held: Accept, call: ToolCall) -> State:
    turns = (*state.turns, {"role": "assistant", "content": _answer_object(call)},
             {"role": "user", "content": NEXT_CALL})
    return replace(state, kind=Kind.MORE, turns=turns, held=held)


def _answer_object(call: ToolCall) -> str:
    """A call as the answer object the constrained round wrote it in (constrain.py)."""
    return _dumps({"name": call.name, "arguments": _loads(call.arguments)})


def _judge_more(plan: Plan, state: State, answer: Answer, number: int) -> Accept | AskForMore:
    """A MORE round: a new call (valid, with a value from the conversation that no held call has: `_novel`)
    joins the held answer, and one more is asked for while the round limit allows; a call that adds nothing, a
    broken one, or text (an upstream that ignored the schema): the held answer is the answer, as it was."""
    held = state.held
    assert held is not None and plan.book is not None
    kwargs = {"new_id": plan.new_id} if plan.new_id else {}
    assessment = assess(answer.message, plan.book, finish_reason=answer.finish_reason, parallel_tool_calls=False,
                        max_repair_chars=plan.max_repair_bytes, asked_format=None, client_json=False, **kwargs)
    broken = cn.broken_call(answer.message, answer.finish_reason)
    calls = held.message.get("tool_calls") or []
    new = assessment.calls[0] if assessment.calls and not assessment.problems and not broken else None
    if new is None or not _novel(plan, new, calls):
        return Accept(held.message, held.finish_reason, held.answer)
    grown = replace(held, message={**held.message, "tool_calls": [*calls, new.to_openai()]})
    omens = tuple(om.repaired(number, r) for r in assessment.repairs)
    if number <= plan.max_rounds:  # 1 + max_rounds rounds, as with corrections
        return AskForMore(_asked_for_more(state, grown, new), omens)
    return Accept(grown.message, grown.finish_reason, grown.answer, omens)


def _novel(plan: Plan, call: ToolCall, held: list[dict[str, Any]]) -> bool:
    """Whether a follow-up call adds something: one of its values is in the user's turns (whole) and in no held
    call. So not a held call again, nor its values swapped about, nor one with made-up values; the same rule
    for a call to another tool (a second tool called with the first one's values is not a second request)."""
    arguments = _loads(call.arguments)
    if not isinstance(arguments, dict):
        return False
    evidence = Evidence.of(_users(plan.body.get("messages")))
    used = {_key(v) for c in held for v in _leaves(_loads((c.get("function") or {}).get("arguments") or "null"))}
    return any(_key(v) not in used and _traced(v, evidence) for v in _leaves(arguments))


def _users(messages: Any) -> list[Any]:
    """The user's turns: what a further call's values come from (tool results hold many values no one asked
    to call with: an agent loop would take them for more calls)."""
    return [m for m in messages if isinstance(m, dict) and m.get("role") == "user"] if isinstance(messages, list) \
        else []


def _traced(leaf: str | float, evidence: Evidence) -> bool:
    """The conversation holds this value: a number as grounding reads numbers, a string whole (ignoring case and
    spaces; not a word of it, as grounding allows: "Maroon 5" is not traced by "Maroon")."""
    if not isinstance(leaf, str):
        return evidence.holds(leaf)
    low = leaf.strip().lower()
    return low in evidence.text or "".join(low.split()) in evidence.squeezed


def _key(leaf: str | float) -> str | float:
    return leaf.strip().lower() if isinstance(leaf, str) else float(leaf)


def _leaves(value: Any) -> list[str | float]:
    """The strings and numbers of a JSON value (booleans and nulls are no evidence of anything)."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, str) and value.strip() or isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]
    return []


def _correct(plan: Plan, state: State, problems: list[Problem], raw: str, rejected: tuple[str, ...],
             number: int, first: tuple[om.Omen, ...] = ()) -> Correct:
    assert plan.book is not None
    text = correction(problems, plan.book, [c.name for c in state.kept])
    tools = {p.tool for p in problems}
    pin = problems[0].tool if len(tools) == 1 and problems[0].tool in plan.book.tools \
        and problems[0].reason != "unknown_spell" else None
    turns = (*state.turns, {"role": "assistant", "content": raw}, {"role": "user", "content": text})
    after = replace(state, turns=turns, pin=pin, rejected=rejected)
    # A first JSON-prompt round is sent without the turns before it (_transcript): say so, never claim a
    # correction the model did not read.
    following = _constraint(plan, after)
    dropped = after.phase is Phase.WAITING and following is not None and following.json_prompt
    return Correct(after, first + tuple(om.rejected(number, p, CONSTRAINED_INSTEAD if dropped else text)
                                        for p in problems))


CONSTRAINED_INSTEAD = ("(not sent to the model: the next round was constrained to a valid call by a grammar, "
                       "without the rejected answer and this correction: correction_context = \"fresh\")")
ANSWERED_IN_TEXT = "(not sent to the model: the request was asked again without tools, for a text answer)"


def _decoded(answer: Answer, step: Round, plan: Plan) -> Answer:
    """A constrained round's answer object as the OpenAI message it stands for."""
    if step.constraint is None or not step.constraint.answer_object:
        return answer
    return replace(answer, message=cn.decode(answer.message, plan.new_id))


def _added(total: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """One round's usage as sent (details and vendor fields kept); over rounds, every count is summed."""
    if not isinstance(usage, dict):
        return total
    return summed_usage(total, usage) if total is not None else copy.deepcopy(usage)


def summed_usage(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """Usage of several answers (rounds, choices): counts added, nested details too, other fields as first seen."""
    out = dict(total)
    for key, value in usage.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif _count(value) and _count(out[key]):
            out[key] += value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = summed_usage(out[key], value)
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _made_up(plan: Plan, assessment: Assessment) -> Problem | None:
    """A call the grammar let through when text could have won, with not one argument value from the
    conversation (`grounding`): the model had no call to make. None when any call is grounded."""
    assert plan.book is not None
    evidence = Evidence.of(plan.body.get("messages"))
    details: list[str] = []
    for call in assessment.calls:
        tool = plan.book.tools[call.name]
        made_up = ungrounded(_loads(call.arguments), tool.parameters, evidence)
        if not made_up:
            return None
        details.append(f"{call.name}: " + ", ".join(made_up) + " appear nowhere in the conversation")
    if not details:
        return None
    tools = {c.name for c in assessment.calls}
    raw = "\n".join(c.arguments for c in assessment.calls)
    return Problem("ungrounded_arguments", next(iter(tools)) if len(tools) == 1 else None, tuple(details), raw)


def _repeat(plan: Plan, assessment: Assessment, answer: Answer) -> Problem | None:
    """Every call repeats one a tool result in the conversation already answered (repeats.py). Never when the
    client requires a call (tool_choice), nor when it allowed no repair round."""
    if plan.required is not None or plan.max_rounds < 1:
        return None
    return repeated_call(assessment.calls, plan.body.get("messages"), sent_answer_text(answer.message))


def _missing_call(plan: Plan, assessment: Assessment, answer: Answer, state: State) -> list[Problem]:
    required = plan.required
    if required is None:
        return []
    names = {c.name for c in (*state.kept, *assessment.calls)}
    if required == "any" and names or required in names:
        return []
    tool = None if required == "any" else required
    why = f"a call to {required} is required" if tool else "a tool call is required"
    return [Problem("missing_call", tool, (why,), rejected_answer_text(answer.message, plan.prompt_format))]


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


def _refusal(message: dict[str, Any]) -> bool:
    """The model declined (OpenAI's `refusal`) and made no call."""
    refusal = message.get("refusal")
    return isinstance(refusal, str) and bool(refusal) and not message.get("tool_calls")


def _empty_tools_answer(plan: Plan, state: State, answer: Answer) -> bool:
    """Ollama drops everything after a <tool_call> tag when no call completes: an empty message. (A refusal
    is not empty: it is an answer.)"""
    if state.mode != "native" or plan.book is None:
        return False
    message = answer.message
    if _refusal(message) or message.get("tool_calls"):
        return False
    text = content_text(message.get("content"))  # reasoning alone (Ollama cut the call after it) is empty,
    if text.strip() and answer.finish_reason == "length":  # unless max_tokens cut the reasoning itself
        return False
    return not any(text[start:end].strip() for start, end in reasoning.outside(text))


How = Literal["schema", "grammar", "tool_choice"]


@dataclass(frozen=True)
class Constraint:
    """How one round's decoding is constrained: which tools, whether text or several calls may win, and by what.

        schema       response_format json_schema of an answer object (constrain.py); the answer is decoded
        grammar      a GBNF `grammar` for a call in the round's own prompt format (grammar.py; llama.cpp)
        tool_choice  a native round asks for a call with tool_choice "required" (the upstream's own grammar)

    `json_prompt`: the round's prompt is rewritten to the answer-object format (constrain.format_section):
    under `constrain = "always"` from the first prompted round, or with `correction_context = "fresh"`. Every
    other constrained round keeps the first round's prompt byte for byte (docs/contract.md section 5)."""

    book: Toolbox
    text: bool
    parallel: bool
    how: How = "schema"
    json_prompt: bool = True
    grammar: str | None = None
    prompt: tuple[Toolbox, bool, bool] | None = None  # json_prompt: the prompt's (tools, text, parallel)
    prompted: bool = False  # a native request's correction sent prompted: its template drops the tools

    @property
    def answer_object(self) -> bool:
        """The answer is the JSON answer object (decoded by constrain.decode), not the model's own format."""
        return self.how == "schema"

    def schema(self) -> dict[str, Any]:
        return cn.answer_schema(self.book, text=self.text, parallel=self.parallel)


def _transcript(state: State, constraint: Constraint | None) -> list[dict[str, Any]]:
    """The hidden turns a round is sent. A constrained round leaves out the turns of the unconstrained rounds
    before it: the grammar now does what their corrections asked (a call, a known name, valid arguments),
    and a small model copies a failed answer's mistakes from its context. Measured on SmolLM2-135M, BFCL
    first 20 entries, tool_choice required, constrain repair, exact calls: simple 14-15 with this, 5 with the
    whole transcript, 4 with the corrections alone; multiple 6 with this, 0 with the corrections alone. What
    constrained rounds were told is kept: a grammar-valid answer bounced for a rule the grammar cannot hold
    (a pattern, a format) needs its correction."""
    if constraint is None or not constraint.json_prompt or state.phase is not Phase.CONSTRAINING:
        return list(state.turns)
    return list(state.turns[state.grammar_from:])


def _constraint(plan: Plan, state: State) -> Constraint | None:
    """`repair`: correction rounds are constrained; `always`: prompted rounds from the first one too.
    A client's own response_format wins; a refused schema turns constraining off for the request.
    A correction round keeps the first round's prompt and carries the transcript, on every upstream: a native
    one asks for the call with tool_choice "required" (same tools: a pin would change the tools llama.cpp
    renders into the prompt, so the correction names the tool instead; none where the upstream refused
    tool_choice before, `plan.tool_choice`), or, where the probe said the template drops the tools
    (`plan.native_calls` False: llama.cpp --jinja then ignores tool_choice), goes prompted; a prompted one gets
    a GBNF grammar in its own format where the upstream takes one (`plan.grammar`), else the answer schema. The
    tiny-model shortcut, a JSON-prompt round without the transcript, only under `correction_context = "fresh"`."""
    book = plan.book
    if book is None or not book.tools or plan.constrain == "off" or state.phase is Phase.REFUSED:
        return None
    first_round_too = plan.constrain == "always" and state.mode == "prompted"
    if "response_format" in plan.body or not (state.turns or first_round_too):
        return None
    required = plan.required
    if required not in (None, "any") and required in book.tools:
        book = book.restricted_to(required)
    offered = book  # what the first round offered
    if offered is plan.book and state.pin is not None:
        book = book.restricted_to(state.pin)
    free = required is None and state.pin is None
    parallel = plan.parallel and state.pin is None
    if first_round_too:  # every round keeps the first round's prompt: a pin narrows only the schema
        return Constraint(book, text=free, parallel=parallel, prompt=(offered, required is None, plan.parallel))
    if plan.correction_context == "fresh" or state.fresh:
        return Constraint(book, text=free, parallel=parallel)
    if state.mode == "native" and plan.native_calls is False:  # the template drops the tools: prompted
        return _prompted(plan, book, free, parallel, switched=True)
    if state.mode == "native":
        if not plan.tool_choice:
            return None
        return Constraint(plan.book or book, text=False, parallel=plan.parallel, how="tool_choice", json_prompt=False)
    return _prompted(plan, book, free, parallel)


def _prompted(plan: Plan, book: Toolbox, free: bool, parallel: bool, switched: bool = False) -> Constraint | None:
    """A prompted correction round: a GBNF grammar in the prompt's format where the upstream takes one, else the
    answer schema. `switched`: a native request's round, sent prompted (its template drops the tools)."""
    grammar = gbnf(book, plan.prompt_format, text=free, parallel=parallel) if plan.grammar else None
    if grammar is not None and len(grammar) > plan.max_grammar_bytes:
        return None  # over budget: the round goes unconstrained (its record says so), not a huge upstream request
    if grammar is not None:
        return Constraint(book, text=free, parallel=parallel, how="grammar", json_prompt=False, grammar=grammar,
                          prompted=switched)
    return Constraint(book, text=free, parallel=parallel, json_prompt=False, prompted=switched)


_SCHEMA_REFUSAL = ("response_format", "grammar", "schema")  # "schema" covers json_schema


def _tool_choice_refused(error: UpstreamError) -> bool:
    """vLLM before 0.8 ("tool_choice = \"required\" is not supported!"), "Currently only named tools are
    supported", llama.cpp without --jinja ("tool_choice param requires --jinja flag"), and the like."""
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(w in text for w in ("tool_choice", "tool choice", "named tools"))


def _schema_refused(error: UpstreamError) -> bool:
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(word in text for word in _SCHEMA_REFUSAL)


def upstream_body(plan: Plan, mode: Mode, extra: list[dict[str, Any]],
                  constraint: Constraint | None = None, *, tools: bool = True) -> dict[str, Any]:
    body = plan.body
    if not tools:  # the conversation alone, for a text answer
        body = prompted.to_prompted(body, None, plan.prompt_format)
    elif constraint is not None and constraint.json_prompt:
        listed, text, parallel = constraint.prompt or (constraint.book, constraint.text, constraint.parallel)
        section = cn.format_section(listed, text=text, parallel=parallel)
        body = prompted.to_prompted(body, listed, "constrained", call_format=section)
        body["response_format"] = cn.response_format(constraint.schema())
    elif constraint is not None and constraint.how == "tool_choice":
        body = native_body(body)
        body["tool_choice"] = "required"  # (a named choice is "required" already, with its one tool)
    elif plan.book is not None and (mode == "prompted" or constraint is not None and constraint.prompted):
        body = prompted.to_prompted(body, plan.book, plan.prompt_format, parallel=plan.parallel,
                                    required=plan.required)
        if constraint is not None and constraint.grammar is not None:
            body["grammar"] = constraint.grammar
        elif constraint is not None:
            body["response_format"] = cn.response_format(constraint.schema())
    elif plan.book is None and mode == "prompted":
        body = prompted.to_prompted(body, None, plan.prompt_format)
    else:
        body = native_body(body)
    if extra:
        body = {**body, "messages": [*body["messages"], *extra]}
    return body


def native_body(body: dict[str, Any]) -> dict[str, Any]:
    """Absorb upstream quirks: a named tool_choice is sent as only that tool with "required" (llama.cpp
    reads the object form as "auto"); history tool_calls get the `type` and `arguments` llama.cpp needs."""
    out = dict(body)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and isinstance(body.get("tools"), list):
        name = (choice.get("function") or {}).get("name")
        out["tools"] = [t for t in body["tools"] if (t.get("function") or {}).get("name") == name]
        out["tool_choice"] = "required"
    out["messages"] = [_normalised(m) for m in body.get("messages", [])]
    return out


def _normalised(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return message
    fixed = []
    for call in calls:
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        function["arguments"] = arguments if isinstance(arguments, str) and arguments else (
            "{}" if arguments in (None, "") else _dumps(arguments))
        fixed.append({**call, "type": call.get("type") or "function", "function": function})
    return {**message, "tool_calls": fixed}


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _loads(arguments: str) -> Any:
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None


def _client_message(assessment: Assessment, sent: dict[str, Any]) -> dict[str, Any]:
    """The upstream's message with only what tier 1 changed replaced (content, calls): its reasoning fields,
    refusal and every other field go to the client as they came. Reasoning a call format holds in content
    (harmony analysis, Command-R thinking, <seed:think>) is moved out with the calls, into reasoning_content."""
    message: dict[str, Any] = {"role": "assistant"}
    message.update((k, v) for k, v in sent.items() if k not in ("role", "content", "tool_calls"))
    message["content"] = assessment.content
    if assessment.reasoning:
        before = message.get("reasoning_content")
        message["reasoning_content"] = f"{before}\n{assessment.reasoning}" if before else assessment.reasoning
    if assessment.calls:
        message["tool_calls"] = [c.to_openai() for c in assessment.calls]
    return message


def _unechoed(message: dict[str, Any], mode: Mode) -> dict[str, Any]:
    """A prompted round's message without the tool-result tags the proxy wrote into its history and the model
    echoed (prompted.without_result_tags); any other message as it is."""
    content = message.get("content")
    if mode != "prompted" or not isinstance(content, str):
        return message
    text = prompted.without_result_tags(content)
    return message if text == content else {**message, "content": text}


def _finish(assessment: Assessment, answer: Answer) -> str:
    if assessment.calls:
        return "tool_calls"
    reason = answer.finish_reason or "stop"
    return "stop" if reason == "tool_calls" else reason


def _final(plan: Plan, accept: Accept, mode: Mode, omens: list[om.Omen], usage: dict[str, Any] | None) -> Final:
    kinds = {o.type for o in omens}
    outcome = ("surrendered" if accept.surrendered else "fallback" if "SpellCallingFallback" in kinds
               else "rejected" if "SpellCallRejected" in kinds else "repaired" if "SpellCallRepaired" in kinds
               else "clean")
    answer = accept.answer
    return Final(accept.message, accept.finish_reason, usage, mode, len(plan.records), omens, answer.meta,
                 outcome, answer.extra, answer.choice_extra)
