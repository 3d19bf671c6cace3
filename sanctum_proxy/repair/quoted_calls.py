"""The calls an upstream parse failure quotes whole, read by tier 1 as if sent as content."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Repair, ToolCall
from sanctum_proxy.core.openai_chat import tool_call
from sanctum_proxy.core.shapes import ChatMessage, ClientMessage
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.answer_checks import missing_call
from sanctum_proxy.repair.client_message import accepted_omens, client_message
from sanctum_proxy.repair.loop_data import Answer, Plan
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.upstream_errors import quoted_arguments, quoted_output

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
