"""A round's answer before tier 2: its calls, a refusal, an empty answer, a missing required call, a repeat."""

from __future__ import annotations

from dataclasses import replace

import orjson

from sanctum_proxy.codecs import families
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.calls import Assessment, Problem, ToolCall, content_text, is_example_hint
from sanctum_proxy.core.shapes import ChatMessage, JSONValue
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.constraint import Constraint
from sanctum_proxy.repair.correct import rejected_answer_text, sent_answer_text
from sanctum_proxy.repair.events import Answer, Mode
from sanctum_proxy.repair.grounding import leaves, loads
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.repeats import repeated_call


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
