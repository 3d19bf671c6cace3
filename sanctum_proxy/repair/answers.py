"""A round's answer: its checks before tier 2, repeated calls, calls quoted in an upstream error, the reply."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

import orjson

from sanctum_proxy.codecs import families
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.calls import Assessment, Problem, Repair, ToolCall, content_text, is_example_hint
from sanctum_proxy.core.openai_chat import tool_call
from sanctum_proxy.core.shapes import ChatMessage, ClientMessage, JSONValue
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.constrain import Constraint
from sanctum_proxy.repair.grounding import leaves, loads
from sanctum_proxy.repair.loop_data import Answer, Mode, Plan
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.round_body import rejected_answer_text, sent_answer_text
from sanctum_proxy.repair.upstream_errors import quoted_arguments, quoted_output

MAX_RESULT_CHARS = 600  # of a result quoted in the correction


def answered_calls(messages: JSONValue, names: frozenset[str] | None = None) -> dict[tuple[str, bytes], str]:
    """(name, canonical arguments) -> result text, for every answered call (of one of `names`)."""
    if not isinstance(messages, list):
        return {}
    asked: dict[str, tuple[str, bytes]] = {}
    answered: dict[tuple[str, bytes], str] = {}
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(call.get("id"), str) and (
                        names is None or str(function.get("name")) in names):
                    asked[call["id"]] = (str(function.get("name")), canonical(function.get("arguments")))
        elif message.get("role") == "tool" and message.get("tool_call_id") in asked:
            answered[asked[message["tool_call_id"]]] = content_text(message.get("content"))
    return answered


def canonical(arguments: JSONValue) -> bytes:
    """Arguments as sorted-key JSON."""
    if isinstance(arguments, str):
        return _canonical_text(arguments) if len(arguments) <= MEMO_CHARS else _canonical_of(arguments)
    return _canonical_of(arguments)


MEMO_CHARS = 4096  # a conversation's calls come back every turn: each read once


@functools.lru_cache(maxsize=1024)
def _canonical_text(arguments: str) -> bytes:
    return _canonical_of(arguments)


def _canonical_of(arguments: JSONValue) -> bytes:
    value = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            return arguments.strip().encode()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(value).encode()


def repeated_call(calls: Sequence[ToolCall], messages: JSONValue, raw: Callable[[], str]) -> Problem | None:
    """A Problem when every call repeats an answered one; a new call beside a repeat passes."""
    if not calls:
        return None
    answered = answered_calls(messages, frozenset(c.name for c in calls))
    if not answered:
        return None
    results = [answered.get((c.name, canonical(c.arguments))) for c in calls]
    if any(r is None for r in results):
        return None
    said = tuple(f"The tool {c.name} already returned: {_excerpt(r or '')}"
                 for c, r in zip(calls, results, strict=True))
    question = _last_question(messages)
    ask = f"Using that result, answer my question: {question}" if question else "Using that result, answer me."
    names = {c.name for c in calls}
    return Problem("repeated_call", next(iter(names)) if len(names) == 1 else None, (*said, ask), raw())


def _last_question(messages: JSONValue) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _excerpt(content_text(message.get("content")))
    return ""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " ..."


def refusal(message: ChatMessage) -> bool:
    """The model declined (OpenAI's `refusal`) and made no call."""
    said = message.get("refusal")
    return isinstance(said, str) and bool(said) and not message.get("tool_calls")


def empty_tools_answer(plan: Plan, mode: Mode, answer: Answer) -> bool:
    """Ollama's answer when no call after a <tool_call> tag completes: an empty message."""
    if mode != "native" or plan.book is None:
        return False
    message = answer.message
    if refusal(message) or message.get("tool_calls"):
        return False
    text = content_text(message.get("content"))  # reasoning alone is empty,
    if text.strip() and answer.finish_reason == "length":  # unless max_tokens cut it
        return False
    return not any(text[start:end].strip() for start, end in reasoning.outside(text))


def read_calls(plan: Plan, mode: Mode, constraint: Constraint | None, answer: Answer,
               kept: tuple[ToolCall, ...]) -> tuple[Assessment, Problem | None, list[Problem]]:
    """Tier 1 in the round's format: the assessment, a broken answer object, the problems."""
    assert plan.book is not None
    answer_object = constraint is not None and constraint.answer_object
    sent_prompted = mode == "prompted" or constraint is not None and constraint.prompted
    asked = families.codec_of(plan.prompt_format) if sent_prompted and not answer_object else None
    assessment = assess(answer.message, plan.book, finish_reason=answer.finish_reason,
                        parallel_tool_calls=plan.parallel, max_repair_chars=plan.max_repair_bytes,
                        asked_format=asked, client_json=cn.asks_json(plan.body), **plan.new_ids)
    broken = cn.broken_call(answer.message, answer.finish_reason) if answer_object else None
    if sent_prompted and plan.required is not None and not broken:  # the example showed hints
        assessment = without_copied_hints(assessment)
    problems = [broken] if broken else list(assessment.problems) or missing_call(plan, assessment, answer, kept)
    return assessment, broken, problems


def forbidden_calls(plan: Plan, answer: Answer) -> Assessment | None:
    """The calls of an answer to tool_choice "none" (native, or read from its text), or None if it made none."""
    if plan.forbidden is None or refusal(answer.message):
        return None
    assessment = assess(answer.message, plan.forbidden, finish_reason=answer.finish_reason,
                        parallel_tool_calls=True, max_repair_chars=plan.max_repair_bytes,
                        asked_format=None, client_json=cn.asks_json(plan.body), **plan.new_ids)
    return assessment if assessment.calls or assessment.problems else None


def without_copied_hints(assessment: Assessment) -> Assessment:
    """Calls holding the example's type hints (`<string>`) as problems, so the model writes values."""
    copied = {c.id: hints for c in assessment.calls if (hints := _copied_hints(loads(c.arguments)))}
    if not copied:
        return assessment
    problems = tuple(Problem("invalid_arguments", c.name,
                             tuple(f"{h} is the example's placeholder, not a value: write the value it stands for"
                                   for h in copied[c.id]), c.arguments)
                     for c in assessment.calls if c.id in copied)
    return replace(assessment, calls=tuple(c for c in assessment.calls if c.id not in copied),
                   problems=(*assessment.problems, *problems))


def _copied_hints(args: JSONValue) -> list[str]:
    if not isinstance(args, dict):
        return [f"the value {h}" for h in leaves(args) if is_example_hint(h)][:1]
    named = ((k, next((h for h in leaves(v) if is_example_hint(h)), None)) for k, v in args.items())
    return [f"argument {k!r} ({h})" for k, h in named if h is not None]


def missing_call(plan: Plan, assessment: Assessment, answer: Answer, kept: tuple[ToolCall, ...]) -> list[Problem]:
    """The problem of an answer lacking the call tool_choice requires."""
    required = plan.required
    if required is None:
        return []
    names = {c.name for c in (*kept, *assessment.calls)}
    if required == "any" and names or required in names:
        return []
    tool = None if required == "any" else required
    why = f"a call to {required} is required" if tool else "a tool call is required"
    return [Problem("missing_call", tool, (why,), rejected_answer_text(answer.message, plan.prompt_format))]


def allows(plan: Plan, calls: tuple[ToolCall, ...]) -> bool:
    """Whether these calls alone satisfy the request's tool_choice."""
    required = plan.required
    return bool(calls) and (required in (None, "any") or any(c.name == required for c in calls))


def repeat(plan: Plan, assessment: Assessment, answer: Answer) -> Problem | None:
    """Every call repeats an answered one; never when a call is required or no repair round allowed."""
    if plan.required is not None or plan.max_rounds < 1:
        return None
    return repeated_call(assessment.calls, plan.body.get("messages"), lambda: sent_answer_text(answer.message))


def joined(kept: tuple[ToolCall, ...], calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """The kept calls and a new answer's valid ones, each once."""
    out = list(kept)
    seen = {_call_key(c) for c in kept}
    for call in calls:
        if _call_key(call) not in seen:
            seen.add(_call_key(call))
            out.append(call)
    return tuple(out)


def _call_key(call: ToolCall) -> tuple[str, str]:
    arguments = loads(call.arguments)
    try:
        return call.name, orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return call.name, call.arguments


def client_message(assessment: Assessment, sent: ChatMessage) -> ClientMessage:
    """The upstream's message with only what tier 1 changed replaced."""
    out: dict[str, object] = {"role": "assistant"}  # other fields ride along as sent
    out.update((k, v) for k, v in sent.items() if k not in ("role", "content", "tool_calls"))
    message = cast(ClientMessage, out)
    message["content"] = assessment.content
    if assessment.reasoning:
        before = message.get("reasoning_content")
        message["reasoning_content"] = f"{before}\n{assessment.reasoning}" if before else assessment.reasoning
    if assessment.calls:
        message["tool_calls"] = [c.to_openai() for c in assessment.calls]
    return message


def passed(message: ChatMessage) -> ClientMessage:
    """An answer accepted as it came (a cast: the writers check its fields)."""
    return cast(ClientMessage, message)


def unechoed(message: ClientMessage, mode: Mode) -> ClientMessage:
    """A prompted message without the tool-result tags the model echoed."""
    content = message.get("content")
    if mode != "prompted" or not isinstance(content, str):
        return message
    text = prompted.without_result_tags(content)
    return message if text == content else {**message, "content": text}


def accepted_omens(number: int, assessment: Assessment) -> tuple[om.Omen, ...]:
    """The omens of an accepted answer's calls: mended or left out."""
    omens = [om.repaired(number, r) for r in assessment.repairs]
    omens += [om.dropped(number, c.name, c.id, c.arguments) for c in assessment.dropped]
    omens += [om.dropped(number, c.name, c.id, c.arguments, "duplicate_call") for c in assessment.duplicates]
    return tuple(omens)


def finish(assessment: Assessment, answer: Answer) -> str:
    if assessment.calls:
        return "tool_calls"
    reason = answer.finish_reason or "stop"
    return "stop" if reason == "tool_calls" else reason


def outcome(omens: list[om.Omen], surrendered: bool) -> om.Outcome:
    """The most telling outcome of the request's omens."""
    kinds = {o.type for o in omens}
    return (om.Outcome.SURRENDERED if surrendered else om.Outcome.FALLBACK if "SpellCallingFallback" in kinds
            else om.Outcome.REJECTED if "SpellCallRejected" in kinds
            else om.Outcome.REPAIRED if "SpellCallRepaired" in kinds else om.Outcome.CLEAN)


READ_FROM_ERROR = "read_from_upstream_error"
ONLY_TOOL = "name_of_the_only_tool"  # Ollama's harmony error quotes the arguments alone
# Mends closing what was left open: the quote, not the model, may have stopped there.
_CLOSING = frozenset({"unclosed_braces", "unclosed_tag", "unclosed_at_end"})


@dataclass(frozen=True)
class Quoted:

    message: ClientMessage
    answer: Answer
    omens: tuple[om.Omen, ...]


def read_quote(plan: Plan, error: UpstreamError, kept: tuple[ToolCall, ...], number: int) -> Quoted | None:
    """The quote's valid or locally mended calls as the answer; None to ask again."""
    if plan.book is None:
        return None
    quote, arguments = quoted_output(error), quoted_arguments(error)
    only = next(iter(plan.book.tools)) if len(plan.book.tools) == 1 else None
    if quote is not None:
        sent: ChatMessage = {"role": "assistant", "content": quote}
    elif arguments is not None and only is not None:  # no name quoted: the one tool offered
        sent = {"role": "assistant", "content": None, "tool_calls": [tool_call("", only, arguments)]}
    else:
        return None
    assessment = assess(sent, plan.book, finish_reason="length", parallel_tool_calls=plan.parallel,
                        max_repair_chars=plan.max_repair_bytes, asked_format=None,
                        client_json=cn.asks_json(plan.body), **plan.new_ids)
    answer = Answer(sent, "tool_calls", None, {})
    mends = {m for r in assessment.repairs for m in r.repairs}
    if (not assessment.calls or assessment.problems or mends & _CLOSING
            or missing_call(plan, assessment, answer, kept)):
        return None
    read = (READ_FROM_ERROR,) if quote is not None else (READ_FROM_ERROR, ONLY_TOOL)
    repairs = assessment.repairs or tuple(Repair(c.name, c.id, (), c.arguments) for c in assessment.calls)
    marked = replace(assessment, repairs=tuple(replace(r, repairs=(*read, *r.repairs)) for r in repairs))
    return Quoted(client_message(assessment, sent), answer, accepted_omens(number, marked))
