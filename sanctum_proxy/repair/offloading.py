"""Which steps leave the event loop (core/offload.py), and the thresholds: reading a large request, building a
round for tools with long schemas, judging a long answer or one against schemas that are long or branch."""

from __future__ import annotations

from sanctum_proxy.repair.events import Answer
from sanctum_proxy.repair.plan import Plan

INLINE_PARSE_BYTES = 16 * 1024  # a longer request body is read off the event loop
INLINE_TOOLS_BYTES = 4096  # ... and a shorter one with tools: a new schema's meta-schema check costs per byte
INLINE_ANSWER_CHARS = 4096  # a longer answer is judged off the event loop (core/offload.py)
INLINE_SCHEMA_BYTES = 64 * 1024  # rounds for tools with longer schemas are built there too
INLINE_CHECKED_SCHEMA_BYTES = 4096  # ... and answers to tools with longer schemas are judged there


def heavy_body(raw: bytes) -> bool:
    """Whether reading this request (JSON, depth, each tool schema's checks, RE2 patterns) may take milliseconds."""
    tools = len(raw) > INLINE_TOOLS_BYTES and (b'"tools"' in raw or b'"functions"' in raw)
    return len(raw) > INLINE_PARSE_BYTES or tools or b'"pattern' in raw


def heavy_round(plan: Plan) -> bool:
    """Whether building the next round may take more than a few milliseconds (a grammar, a prompt from long
    schemas)."""
    return plan.book is not None and plan.book.schema_bytes > INLINE_SCHEMA_BYTES


def heavy_answer(plan: Plan, answer: Answer) -> bool:
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
    # a first check against a long schema compiles it (its meta-schema check costs per byte)
    return plan.book.schema_bytes > INLINE_CHECKED_SCHEMA_BYTES or plan.book.branching  # (a walk: small books only)
