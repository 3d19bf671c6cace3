"""The choice of a round's constraint: answer schema, GBNF grammar, tool_choice "required" or none, and which
of the round's hidden turns it is sent (`transcript`); whether an upstream refused one (`judge_error`).

`repair`: correction rounds are constrained; `always`: prompted rounds from the first one too. A client's own
response_format wins; a refused schema turns constraining off for the request. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from sanctum_proxy.core.shapes import ChatMessage, JSONObject
from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.events import Answer, Mode
from sanctum_proxy.repair.grammar import GrammarTooLarge, gbnf
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.toolbox import Toolbox

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

    def schema(self) -> JSONObject:
        return cn.answer_schema(self.book, text=self.text, parallel=self.parallel)


@dataclass(frozen=True)
class Stage:
    """What of the loop's state (loop.State) the choice reads."""

    mode: Mode
    corrected: bool  # hidden correction turns come before this round
    pin: str | None = None  # the one known tool the last correction was about
    fresh: bool = False  # a correction with its transcript did not fit the context: fresh corrections from here
    refused: bool = False  # the upstream refused a schema, grammar or tool_choice for this request


def transcript(turns: Sequence[ChatMessage], constraint: Constraint | None,
               constrained_from: int | None) -> list[ChatMessage]:
    """The hidden turns a round is sent. A constrained round leaves out the turns of the unconstrained rounds
    before it (`constrained_from`: how many came before the first constrained round): the grammar now does
    what their corrections asked (a call, a known name, valid arguments), and a small model copies a failed
    answer's mistakes from its context (bench/results/design_costs.md). What constrained rounds were told is kept: a
    grammar-valid answer bounced for a rule the grammar cannot hold (a pattern, a format) needs its correction."""
    if constraint is None or not constraint.json_prompt or constrained_from is None:
        return list(turns)
    return list(turns[constrained_from:])


def chosen(plan: Plan, stage: Stage) -> Constraint | None:
    """A correction round keeps the first round's prompt and carries the transcript, on every upstream: a native
    one asks for the call with tool_choice "required" (same tools: a pin would change the tools llama.cpp
    renders into the prompt, so the correction names the tool instead; none where the upstream refused
    tool_choice before, `plan.tool_choice`), or, where the probe said the template drops the tools
    (`plan.native_calls` False: llama.cpp --jinja then ignores tool_choice), goes prompted; a prompted one gets
    a GBNF grammar in its own format where the upstream takes one (`plan.grammar`), else the answer schema. The
    tiny-model shortcut, a JSON-prompt round without the transcript, only under `correction_context = "fresh"`."""
    book = plan.book
    if book is None or not book.tools or plan.constrain == "off" or stage.refused:
        return None
    first_round_too = plan.constrain == "always" and stage.mode == "prompted"
    if "response_format" in plan.body or not (stage.corrected or first_round_too):
        return None
    required = plan.required
    if required not in (None, "any") and required in book.tools:
        book = book.restricted_to(required)
    offered = book  # what the first round offered
    if offered is plan.book and stage.pin is not None:
        book = book.restricted_to(stage.pin)
    free = required is None and stage.pin is None
    parallel = plan.parallel and stage.pin is None
    if first_round_too:  # every round keeps the first round's prompt: a pin narrows only the schema
        return Constraint(book, text=free, parallel=parallel, prompt=(offered, required is None, plan.parallel))
    if plan.correction_context == "fresh" or stage.fresh:
        return Constraint(book, text=free, parallel=parallel)
    if stage.mode == "native" and plan.native_calls is False:  # the template drops the tools: prompted
        return _prompted(plan, book, free, parallel, switched=True)
    if stage.mode == "native":
        if not plan.tool_choice:
            return None
        return Constraint(plan.book or book, text=False, parallel=plan.parallel, how="tool_choice", json_prompt=False)
    return _prompted(plan, book, free, parallel)


def _prompted(plan: Plan, book: Toolbox, free: bool, parallel: bool, switched: bool = False) -> Constraint | None:
    """A prompted correction round: a GBNF grammar in the prompt's format where the upstream takes one, else the
    answer schema. `switched`: a native request's round, sent prompted (its template drops the tools)."""
    try:
        grammar = gbnf(book, plan.prompt_format, text=free, parallel=parallel,
                       limit=plan.max_grammar_bytes) if plan.grammar else None
    except GrammarTooLarge:  # found while building: never built whole
        return None  # over budget: the round goes unconstrained (its record says so), not a huge upstream request
    if grammar is not None and len(grammar) > plan.max_grammar_bytes:
        return None  # over budget: the round goes unconstrained (its record says so), not a huge upstream request
    if grammar is not None:
        return Constraint(book, text=free, parallel=parallel, how="grammar", json_prompt=False, grammar=grammar,
                          prompted=switched)
    return Constraint(book, text=free, parallel=parallel, json_prompt=False, prompted=switched)


def decoded(answer: Answer, constraint: Constraint | None, plan: Plan) -> Answer:
    """A constrained round's answer object as the OpenAI message it stands for."""
    if constraint is None or not constraint.answer_object:
        return answer
    return replace(answer, message=cn.decode(answer.message, plan.new_id))


_SCHEMA_REFUSAL = ("response_format", "grammar", "schema")  # "schema" covers json_schema


def tool_choice_refused(error: UpstreamError) -> bool:
    """vLLM before 0.8 ("tool_choice = \"required\" is not supported!"), "Currently only named tools are
    supported", llama.cpp without --jinja ("tool_choice param requires --jinja flag"), and the like."""
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(w in text for w in ("tool_choice", "tool choice", "named tools"))


def schema_refused(error: UpstreamError) -> bool:
    text = error.message.lower()
    return 400 <= error.upstream_status < 600 and any(word in text for word in _SCHEMA_REFUSAL)
