"""The round loop: one client request, 1 + N upstream rounds, tier 2 corrections and tier 3 surrender.

This is the only part of the repair layer that does I/O, and only through the injected `Sender`
(non-streaming or streaming upstream calls). It yields events:

    ContentDelta   text the client may see now (streaming: only the first round that shows any; the
                   accepted answer of a hidden round comes whole in the Final)
    Final          the answer: the message for the client, usage summed over rounds, every omen

States of one request:  round(mode) --ok--> Final
                        round(native) --tools rejected / upstream parse failure (auto)--> round(prompted)
                        round --problems--> correction round (at most max_repair_rounds) --> ... --> surrender
                        round --a made-up call where text could win, or a call the conversation already
                               answered (repeats.py)--> one round without spells --> Final (text)
Surrender raises SpellCallParseError (422) unless on_surrender is "content".
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from .. import constrain as cn
from .. import families, prompted, reasoning
from .. import omens as om
from ..calls import Assessment, Problem, content_text
from ..errors import ProxyError, SpellCallParseError, UpstreamError
from ..modes import ModeBook, classify
from .correct import correction, rejected_answer_text, sent_answer_text
from .grounding import Evidence, ungrounded
from .mend import assess
from .repeats import repeated_call
from .spellbook import SpellBook

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
    constrained: bool = False  # the round carried the answer schema (response_format json_schema)
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


@dataclass
class Plan:
    """What the loop needs to know about the request, settled before the first round."""

    body: dict[str, Any]
    book: SpellBook | None  # None: no spells offered
    mode: Mode
    auto: bool
    max_rounds: int
    on_surrender: str = "error"
    prompt_format: str = "hermes"
    upstream: str = ""
    modes: ModeBook | None = None
    new_id: Callable[[], str] | None = None
    records: list[RoundRecord] = field(default_factory=list)
    omens: list[om.Omen] = field(default_factory=list)  # every omen so far, kept when a surrender raises
    opening_omens: list[om.Omen] = field(default_factory=list)  # decided before the first round (a probe)
    constrain: cn.Constrain = "off"
    on_constrain_rejected: Callable[[], None] | None = None  # the upstream cannot take the answer schema
    max_repair_bytes: int = 64 * 1024  # call text longer than this is not mended locally (tier 2 instead)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def parallel(self) -> bool:
        return self.body.get("parallel_tool_calls") is not False

    @property
    def required(self) -> str | None:
        """"any" for tool_choice required, a spell name for a named choice, else None."""
        choice = self.body.get("tool_choice")
        if choice == "required":
            return "any"
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None


async def run(plan: Plan, send: Sender) -> AsyncIterator[ContentDelta | FieldDelta | Final]:
    state = _State(plan.mode, omens=list(plan.opening_omens), fell_back=bool(plan.opening_omens))
    plan.omens = state.omens
    while True:
        if len(plan.records) > plan.max_rounds + 2:  # 1 + N rounds, one fallback, one unconstrained retry
            raise SpellCallParseError("spell call could not be repaired: round limit reached",
                                      rounds=len(plan.records), rejected=list(state.rejected))
        constraint = None if state.text_only else _constraint(plan, state)
        if constraint is not None and state.grammar_from is None:
            state.grammar_from = len(state.extra)
        transcript = state.closing if state.text_only else _transcript(state, constraint)
        body = upstream_body(plan, state.mode, transcript, constraint, spells=not state.text_only)
        record = RoundRecord(len(plan.records) + 1, state.mode, body, 0.0, constrained=constraint is not None,
                             free_choice=constraint is not None and constraint.text and not state.extra)
        plan.records.append(record)
        answer = None
        start = time.perf_counter()
        try:
            async for event in send(body, live=not state.extra and not state.shown):
                if isinstance(event, Answer):
                    answer = event
                else:
                    state.shown = state.shown or bool(event.text)
                    yield event
        except ProxyError as error:  # unreachable, timed out or an error answer: this round's own record says so
            record.latency_ms = (time.perf_counter() - start) * 1000
            record.error, record.outcome = {**error.body()["error"], "status": error.status}, "error"
            if not isinstance(error, UpstreamError):
                raise
            if constraint is not None and _schema_refused(error):
                state.unconstrained, record.outcome = True, "fallback"
                if plan.on_constrain_rejected is not None:
                    plan.on_constrain_rejected()
                continue
            if not _fall_back(plan, state, classify(error), error.upstream_status, error.message):
                raise
            record.outcome = "fallback"
            continue
        record.latency_ms = (time.perf_counter() - start) * 1000
        assert answer is not None, "a sender ends every round with an Answer"
        if constraint is not None:
            decoded = cn.decode(answer.message, plan.new_id)
            answer = Answer(decoded, answer.finish_reason, answer.usage, answer.meta, answer.extra,
                            answer.choice_extra)
        record.answer, record.finish_reason, record.usage = answer.message, answer.finish_reason, answer.usage
        state.add_usage(answer.usage)
        if constraint is None and _empty_tools_answer(plan, state, answer) and _fall_back(
                plan, state, "upstream_parse_failure", None, "upstream returned an empty answer to a tools request"):
            record.outcome = "fallback"
            continue
        final = _judge(plan, state, answer, record)
        if final is not None:
            yield final
            return


@dataclass
class _State:
    mode: Mode
    extra: list[dict[str, Any]] = field(default_factory=list)  # hidden correction turns
    omens: list[om.Omen] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    fell_back: bool = False
    pin: str | None = None  # the one known spell the last correction was about
    unconstrained: bool = False  # the upstream refused the answer schema: no more constrained rounds
    grammar_from: int | None = None  # len(extra) when the first constrained round was sent
    shown: bool = False  # live content reached the client: later rounds are hidden (no text twice)
    text_only: bool = False  # a call where text could win was made up or broken: the next round offers no spells
    closing: list[dict[str, Any]] = field(default_factory=list)  # the turns a text-only round is sent

    @property
    def repair_rounds(self) -> int:
        return len(self.extra) // 2

    def add_usage(self, usage: dict[str, Any] | None) -> None:
        """One round's usage as sent (details and vendor fields kept); over rounds, every count is summed."""
        if isinstance(usage, dict):
            self.usage = _summed(self.usage, usage) if self.usage is not None else copy.deepcopy(usage)


def _summed(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    out = dict(total)
    for key, value in usage.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif _count(value) and _count(out[key]):
            out[key] += value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _summed(out[key], value)
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _judge(plan: Plan, state: _State, answer: Answer, record: RoundRecord) -> Final | None:
    """Accept the answer (a Final), bounce it (None: go again), or surrender."""
    number = record.number
    if plan.book is None or state.text_only:
        record.outcome = "accepted"
        return _final(plan, state, answer.message, answer.finish_reason or "stop", answer, number)
    if _refusal(answer.message):  # a refusal is an answer: passed through as it came, in one round
        record.outcome = "accepted"
        return _final(plan, state, answer.message, answer.finish_reason or "stop", answer, number)
    kwargs = {"new_id": plan.new_id} if plan.new_id else {}
    asked = families.codec_of(plan.prompt_format) if state.mode == "prompted" and not record.constrained else None
    assessment = assess(answer.message, plan.book, finish_reason=answer.finish_reason,
                        parallel_tool_calls=plan.parallel, max_repair_chars=plan.max_repair_bytes,
                        asked_format=asked, client_json=cn.asks_json(plan.body), **kwargs)
    broken = cn.broken_call(answer.message, answer.finish_reason) if record.constrained else None
    problems = [broken] if broken else list(assessment.problems) or _missing_call(plan, assessment, answer)
    # The grammar made the model choose between text and a call, and it began a call it could not finish
    # (a string looping until max_tokens, which the same grammar would only repeat) or filled one with values
    # nobody gave: the request is asked again without tools, and that text is the answer. (After a call
    # attempt of its own was bounced, the model meant to call: its calls are judged as usual.)
    unmeant = (broken or (None if problems else _made_up(plan, assessment))) if record.free_choice else None
    if unmeant is not None:
        record.outcome = "rejected"
        state.rejected.append(sent_answer_text(answer.message))
        state.omens.append(om.rejected(number, unmeant, ANSWERED_IN_TEXT))
        state.text_only = True
        return None
    repeat = _repeat(plan, assessment, answer) if not problems else None
    if repeat is not None:  # an answered call again: the result is there, the request is asked for text
        text = correction([repeat], plan.book)
        record.outcome = "rejected"
        state.rejected.append(repeat.raw)
        state.omens.append(om.rejected(number, repeat, text))
        state.text_only = True
        state.closing = [{"role": "user", "content": text}]  # without the repeat: see repeats.py
        return None
    if not problems:
        record.outcome = "accepted"
        state.omens += [om.repaired(number, r) for r in assessment.repairs]
        state.omens += [om.dropped(number, c.name, c.id, c.arguments) for c in assessment.dropped]
        return _final(plan, state, _client_message(assessment, answer.message), _finish(assessment, answer),
                      answer, number)
    record.outcome = "rejected"
    raw = rejected_answer_text(answer.message, plan.prompt_format)  # quoted back in the prompt format
    sent = sent_answer_text(answer.message)  # what the model sent: a surrender's `rejected` (issue 20)
    repeated = bool(state.rejected) and sent == state.rejected[-1]
    state.rejected.append(sent)
    if repeated or state.repair_rounds >= plan.max_rounds:
        return _surrender(plan, state, answer, number, repeated)
    text = correction(problems, plan.book)
    spells = {p.spell for p in problems}
    state.pin = problems[0].spell if len(spells) == 1 and problems[0].spell in plan.book.spells \
        and problems[0].reason != "unknown_spell" else None
    state.extra += [{"role": "assistant", "content": raw}, {"role": "user", "content": text}]
    # The first constrained round is sent without the turns before it (_transcript): say so, never claim a
    # correction the model did not read.
    first_grammar = state.grammar_from is None and _constraint(plan, state) is not None
    state.omens += [om.rejected(number, p, CONSTRAINED_INSTEAD if first_grammar else text) for p in problems]
    return None


CONSTRAINED_INSTEAD = ("(not sent to the model: the next round was constrained to a valid call by a grammar, "
                       "without the rejected answer and this correction)")
ANSWERED_IN_TEXT = "(not sent to the model: the request was asked again without tools, for a text answer)"


def _made_up(plan: Plan, assessment: Assessment) -> Problem | None:
    """A call the grammar let through when text could have won, with not one argument value from the
    conversation (`grounding`): the model had no call to make. None when any call is grounded."""
    assert plan.book is not None
    evidence = Evidence.of(plan.body.get("messages"))
    details: list[str] = []
    for call in assessment.calls:
        spell = plan.book.spells[call.name]
        made_up = ungrounded(_loads(call.arguments), spell.parameters, evidence)
        if not made_up:
            return None
        details.append(f"{call.name}: " + ", ".join(made_up) + " appear nowhere in the conversation")
    if not details:
        return None
    spells = {c.name for c in assessment.calls}
    raw = "\n".join(c.arguments for c in assessment.calls)
    return Problem("ungrounded_arguments", next(iter(spells)) if len(spells) == 1 else None, tuple(details), raw)


def _repeat(plan: Plan, assessment: Assessment, answer: Answer) -> Problem | None:
    """Every call repeats one a tool result in the conversation already answered (repeats.py). Never when the
    client requires a call (tool_choice), nor when it allowed no repair round."""
    if plan.required is not None or plan.max_rounds < 1:
        return None
    return repeated_call(assessment.calls, plan.body.get("messages"), sent_answer_text(answer.message))


def _missing_call(plan: Plan, assessment: Assessment, answer: Answer) -> list[Problem]:
    required = plan.required
    if required is None:
        return []
    names = {c.name for c in assessment.calls}
    if required == "any" and names or required in names:
        return []
    spell = None if required == "any" else required
    why = f"a call to {required} is required" if spell else "a tool call is required"
    return [Problem("missing_call", spell, (why,), rejected_answer_text(answer.message, plan.prompt_format))]


def _surrender(plan: Plan, state: _State, answer: Answer, number: int, repeated: bool) -> Final:
    why = ("the model repeated a rejected call verbatim" if repeated
           else f"no valid spell call after {state.repair_rounds} repair round(s)")
    message = f"spell call could not be repaired: {why}"
    if plan.on_surrender != "content":
        raise SpellCallParseError(message, rounds=len(plan.records), rejected=list(state.rejected))
    state.omens.append(om.surrendered(number, message, state.rejected))
    content = state.rejected[-1] or None
    final = _final(plan, state, {"role": "assistant", "content": content}, "stop", answer, number)
    final.outcome = "surrendered"
    return final


def _fall_back(plan: Plan, state: _State, verdict: str | None, status: int | None, message: str) -> bool:
    """Auto mode only: answer this request prompted; remember it for the model when it is for good."""
    if not plan.auto or state.mode != "native" or verdict is None or plan.book is None:
        return False
    if plan.modes is not None:
        if verdict == "tools_unsupported":
            plan.modes.settle(plan.upstream, plan.model, "prompted", "tools_rejected")
        else:
            plan.modes.parse_failure(plan.upstream, plan.model)
    reason = "tools_rejected" if verdict == "tools_unsupported" else "upstream_parse_failure"
    state.omens.append(om.fallback(len(plan.records), reason, status, message))
    state.mode, state.fell_back, state.extra = "prompted", True, []
    return True


def _refusal(message: dict[str, Any]) -> bool:
    """The model declined (OpenAI's `refusal`) and made no call."""
    refusal = message.get("refusal")
    return isinstance(refusal, str) and bool(refusal) and not message.get("tool_calls")


def _empty_tools_answer(plan: Plan, state: _State, answer: Answer) -> bool:
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


@dataclass(frozen=True)
class Constraint:
    """The answer schema of one constrained round: which spells, and whether text or several calls may win."""

    book: SpellBook
    text: bool
    parallel: bool

    def schema(self) -> dict[str, Any]:
        return cn.answer_schema(self.book, text=self.text, parallel=self.parallel)


def _transcript(state: _State, constraint: Constraint | None) -> list[dict[str, Any]]:
    """The hidden turns a round is sent. A constrained round leaves out the turns of the unconstrained rounds
    before it: the grammar now does what their corrections asked (a call, a known name, valid arguments),
    and a small model copies a failed answer's mistakes from its context. Measured on SmolLM2-135M, BFCL
    first 20 entries, tool_choice required, constrain repair, exact calls: simple 14-15 with this, 5 with the
    whole transcript, 4 with the corrections alone; multiple 6 with this, 0 with the corrections alone. What
    constrained rounds were told is kept: a grammar-valid answer bounced for a rule the grammar cannot hold
    (a pattern, a format) needs its correction."""
    if constraint is None or state.grammar_from is None:
        return state.extra
    return state.extra[state.grammar_from:]


def _constraint(plan: Plan, state: _State) -> Constraint | None:
    """`repair`: correction rounds are constrained; `always`: prompted rounds from the first one too.
    A client's own response_format wins; a refused schema turns constraining off for the request."""
    book = plan.book
    if book is None or not book.spells or plan.constrain == "off" or state.unconstrained:
        return None
    first_round_too = plan.constrain == "always" and state.mode == "prompted"
    if "response_format" in plan.body or not (state.extra or first_round_too):
        return None
    required = plan.required
    if required not in (None, "any") and required in book.spells:
        book = book.restricted_to(required)
    elif state.pin is not None:
        book = book.restricted_to(state.pin)
    free = required is None and state.pin is None
    return Constraint(book, text=free, parallel=plan.parallel and state.pin is None)


_SCHEMA_REFUSAL = ("response_format", "grammar", "schema")  # "schema" covers json_schema


def _schema_refused(error: UpstreamError) -> bool:
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(word in text for word in _SCHEMA_REFUSAL)


def upstream_body(plan: Plan, mode: Mode, extra: list[dict[str, Any]],
                  constraint: Constraint | None = None, *, spells: bool = True) -> dict[str, Any]:
    body = plan.body
    if not spells:  # the conversation alone, for a text answer
        body = prompted.to_prompted(body, None, plan.prompt_format)
    elif constraint is not None:
        section = cn.format_section(constraint.book, text=constraint.text, parallel=constraint.parallel)
        body = prompted.to_prompted(body, constraint.book, "constrained", call_format=section)
        body["response_format"] = cn.response_format(constraint.schema())
    elif plan.book is not None and mode == "prompted":
        body = prompted.to_prompted(body, plan.book, plan.prompt_format, parallel=plan.parallel,
                                    required=plan.required)
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


def _finish(assessment: Assessment, answer: Answer) -> str:
    if assessment.calls:
        return "tool_calls"
    reason = answer.finish_reason or "stop"
    return "stop" if reason == "tool_calls" else reason


def _final(plan: Plan, state: _State, message: dict[str, Any], finish: str, answer: Answer,
           number: int) -> Final:
    kinds = {o.type for o in state.omens}
    outcome = ("fallback" if state.fell_back else "rejected" if "SpellCallRejected" in kinds
               else "repaired" if "SpellCallRepaired" in kinds else "clean")
    return Final(message, finish, state.usage, state.mode, len(plan.records), state.omens, answer.meta, outcome,
                 answer.extra, answer.choice_extra)
