"""Follow-up rounds (`follow_up_calls`): after one free-choice call, ask for the next, kept if novel."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import ToolCall
from sanctum_proxy.core.shapes import ChatMessage, ToolCallWire
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.constraint import Constraint
from sanctum_proxy.repair.grounding import Evidence, key, leaves, loads, traced, users
from sanctum_proxy.repair.loop_data import Answer, Plan
from sanctum_proxy.repair.mend import assess

NEXT_CALL = "Now make the next call the request asks for: other arguments, or another tool."


def follows_up(plan: Plan, constraint: Constraint | None, free_choice: bool, calls: int, number: int) -> bool:
    """Whether to ask for another call after this round."""
    return (plan.follow_up_calls and free_choice and constraint is not None and constraint.answer_object
            and plan.parallel and calls == 1 and number <= plan.max_rounds)


def next_call_turns(call: ToolCall) -> tuple[ChatMessage, ChatMessage]:
    """The call as an answer object, then the request for the next one."""
    written = orjson.dumps({"name": call.name, "arguments": loads(call.arguments)}).decode()
    return {"role": "assistant", "content": written}, {"role": "user", "content": NEXT_CALL}


def next_call(plan: Plan, answer: Answer, number: int) -> tuple[ToolCall | None, tuple[om.Omen, ...]]:
    """A MORE round's one valid call, or None, with its repair omens."""
    assert plan.book is not None
    assessment = assess(answer.message, plan.book, finish_reason=answer.finish_reason, parallel_tool_calls=False,
                        max_repair_chars=plan.max_repair_bytes, asked_format=None, client_json=False,
                        **plan.new_ids)
    broken = cn.broken_call(answer.message, answer.finish_reason)
    if not assessment.calls or assessment.problems or broken:
        return None, ()
    return assessment.calls[0], tuple(om.repaired(number, r) for r in assessment.repairs)


def novel(plan: Plan, call: ToolCall, held: Sequence[ToolCallWire]) -> bool:
    """Whether the call adds a value from the user's turns that no held call has."""
    arguments = loads(call.arguments)
    if not isinstance(arguments, dict):
        return False
    evidence = Evidence.of(users(plan.body.get("messages")))
    used = {key(v) for c in held for v in leaves(loads((c.get("function") or {}).get("arguments") or "null"))}
    return any(key(v) not in used and traced(v, evidence) for v in leaves(arguments))
