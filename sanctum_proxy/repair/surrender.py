"""Tier 3 with `on_surrender = "last_call"`: the model's last call to a known tool instead of the error."""

from __future__ import annotations

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core import openai_chat
from sanctum_proxy.core.calls import Candidate, content_text, new_call_id
from sanctum_proxy.core.decoded_json import Decoded
from sanctum_proxy.core.lenient_json import MAX_REPAIR_CHARS, decode
from sanctum_proxy.core.shapes import ChatMessage, ClientMessage, ToolCallWire, Usage
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.repair.loop_data import Final, Plan, RoundRecord, summed_usage
from sanctum_proxy.repair.mend import calls_outside_reasoning, native_candidates
from sanctum_proxy.repair.toolbox import Toolbox

LAST_CALL = "last_call"


def last_call(plan: Plan, records: list[RoundRecord], error: ToolCallParseError,
              omens: list[om.Omen]) -> Final | None:
    """The Final answering with the last round's calls to known tools, or None: the error stands."""
    record = records[-1] if records else None
    if plan.book is None or record is None or not isinstance(record.answer, dict):
        return None
    calls = known_calls(record.answer, plan.book, plan.max_repair_bytes)
    if not plan.parallel:
        calls = calls[:1]
    if not calls:
        return None
    surrendered = om.surrendered(record.number, f"{error.message}; the last call goes to the client as the model "
                                 "made it (on_surrender = \"last_call\")", error.rejected)
    usage: Usage | None = None
    for each in records:
        if isinstance(each.usage, dict):
            usage = summed_usage(usage, each.usage) if usage is not None else each.usage.copy()
    message: ClientMessage = {"role": "assistant", "content": None, "tool_calls": calls}
    return Final(message, "tool_calls", usage, record.mode, len(records), [*omens, surrendered], {},
                 om.Outcome.SURRENDERED, accepted=record.answer)


def known_calls(message: ChatMessage, book: Toolbox, max_chars: int = MAX_REPAIR_CHARS) -> list[ToolCallWire]:
    """The answer's calls to offered tools with object arguments; markup past `max_chars` was not read."""
    text = content_text(message.get("content"))
    found = calls_outside_reasoning(text, book.name_set) if text else []
    written = [c for f in found if f.end - f.start <= max_chars for c in f.candidates]
    candidates = native_candidates(message.get("tool_calls")) + written
    out = []
    for candidate in candidates:
        name, _ = book.resolve(candidate.name)
        arguments = _arguments(candidate)
        if name is not None and arguments is not None:
            out.append(openai_chat.tool_call(candidate.id or new_call_id(), name, arguments))
    return out


def _arguments(candidate: Candidate) -> str | None:
    """The arguments as JSON object text, mended if broken; None when no object."""
    given = candidate.arguments
    if given is None or given == "":
        return "{}"
    if isinstance(given, dict):
        return orjson.dumps(given).decode()
    decoded = decode(given)
    if not isinstance(decoded, Decoded) or not isinstance(decoded.value, dict):
        return None
    return given if not decoded.repairs else orjson.dumps(decoded.value).decode()
