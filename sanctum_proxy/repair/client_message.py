"""The message, finish reason and outcome a client gets from an accepted round."""

from __future__ import annotations

from typing import cast

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Assessment
from sanctum_proxy.core.shapes import ChatMessage, ClientMessage
from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.events import Answer, Mode


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
