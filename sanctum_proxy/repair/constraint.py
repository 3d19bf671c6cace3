"""Which constraint a round gets (schema, grammar, tool_choice or none) and which hidden turns it is sent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from sanctum_proxy.core.shapes import ChatMessage, JSONObject
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.grammar import GrammarTooLarge, gbnf
from sanctum_proxy.repair.loop_data import Answer, Mode, Plan
from sanctum_proxy.repair.toolbox import Toolbox

How = Literal["schema", "grammar", "tool_choice"]


@dataclass(frozen=True)
class Constraint:
    """How one round's decoding is constrained; `json_prompt` rewrites the prompt for answer objects."""

    book: Toolbox
    text: bool
    parallel: bool
    how: How = "schema"
    json_prompt: bool = True
    grammar: str | None = None
    prompt: tuple[Toolbox, bool, bool] | None = None  # json_prompt: (tools, text, parallel)
    prompted: bool = False  # a native request's correction sent prompted

    @property
    def answer_object(self) -> bool:
        """The answer is the JSON answer object."""
        return self.how == "schema"

    def schema(self) -> JSONObject:
        return cn.answer_schema(self.book, text=self.text, parallel=self.parallel)


@dataclass(frozen=True)
class Stage:
    """The part of loop.State the choice reads."""

    mode: Mode
    corrected: bool
    pin: str | None = None
    fresh: bool = False
    refused: bool = False


def transcript(turns: Sequence[ChatMessage], constraint: Constraint | None,
               constrained_from: int | None) -> list[ChatMessage]:
    """The hidden turns a round is sent; JSON-prompt rounds drop unconstrained rounds' turns."""
    if constraint is None or not constraint.json_prompt or constrained_from is None:
        return list(turns)
    return list(turns[constrained_from:])


def chosen(plan: Plan, stage: Stage) -> Constraint | None:
    """tool_choice for native corrections, a grammar or schema for prompted ones, or None."""
    book = plan.book
    if book is None or not book.tools or plan.constrain == "off" or stage.refused:
        return None
    first_round_too = plan.constrain == "always" and stage.mode == "prompted"
    if "response_format" in plan.body or not (stage.corrected or first_round_too):
        return None
    required = plan.required
    if required not in (None, "any") and required in book.tools:
        book = book.restricted_to(required)
    offered = book
    if offered is plan.book and stage.pin is not None:
        book = book.restricted_to(stage.pin)
    free = required is None and stage.pin is None
    parallel = plan.parallel and stage.pin is None
    if first_round_too:  # a pin narrows only the schema, never the prompt
        return Constraint(book, text=free, parallel=parallel, prompt=(offered, required is None, plan.parallel))
    if plan.correction_context == "fresh" or stage.fresh:
        return Constraint(book, text=free, parallel=parallel)
    if stage.mode == "native" and plan.native_calls is False:  # the template drops the tools
        return _prompted(plan, book, free, parallel, switched=True)
    if stage.mode == "native":
        if not plan.tool_choice:
            return None
        return Constraint(plan.book or book, text=False, parallel=plan.parallel, how="tool_choice", json_prompt=False)
    return _prompted(plan, book, free, parallel)


def _prompted(plan: Plan, book: Toolbox, free: bool, parallel: bool, switched: bool = False) -> Constraint | None:
    """A grammar where the upstream takes one, else the schema."""
    try:
        grammar = gbnf(book, plan.prompt_format, text=free, parallel=parallel,
                       limit=plan.max_grammar_bytes) if plan.grammar else None
    except GrammarTooLarge:  # found while building: never built whole
        return None  # over budget: unconstrained, as its record says
    if grammar is not None and len(grammar) > plan.max_grammar_bytes:
        return None  # over budget: unconstrained rather than huge
    if grammar is not None:
        return Constraint(book, text=free, parallel=parallel, how="grammar", json_prompt=False, grammar=grammar,
                          prompted=switched)
    return Constraint(book, text=free, parallel=parallel, json_prompt=False, prompted=switched)


def decoded(answer: Answer, constraint: Constraint | None, plan: Plan) -> Answer:
    if constraint is None or not constraint.answer_object:
        return answer
    return replace(answer, message=cn.decode(answer.message, plan.new_id))


_SCHEMA_REFUSAL = ("response_format", "grammar", "schema")  # "schema" covers json_schema


def tool_choice_refused(error: UpstreamError) -> bool:
    """vLLM before 0.8 and llama.cpp without --jinja refuse tool_choice "required" in words like these."""
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(w in text for w in ("tool_choice", "tool choice", "named tools"))


def schema_refused(error: UpstreamError) -> bool:
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(word in text for word in _SCHEMA_REFUSAL)
