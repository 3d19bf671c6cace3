"""Tier 2: the hidden user turn that tells the model exactly what to fix, and the text of a rejected answer.

`correction` turns Problems into one message: an unknown name gets the list of spells with their
parameters; missing, unexpected or invalid arguments are named one by one, with the spell's parameters
repeated compactly; broken JSON and a missing required call are said plainly. `rejected_answer_text`
writes an answer (content and native calls) as plain text, so a rejected call goes back into the
transcript as assistant text, never as a native call with broken arguments; native calls are quoted in
the call format of the model's family (Hermes unless known), calls in content stay as the model wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sanctum_proxy import families
from sanctum_proxy.calls import Problem, Spell
from sanctum_proxy.repair.mend import content_text
from sanctum_proxy.repair.spellbook import SpellBook

_CLOSING = "Answer again with only the corrected tool call, and nothing else."


def correction(problems: Sequence[Problem], book: SpellBook) -> str:
    lines: list[str] = []
    for problem in problems:
        lines.extend(_lines(problem, book))
    if any(p.reason != "repeated_call" for p in problems):  # a repeat is asked for text, not a better call
        lines.append(_CLOSING)
    return "\n".join(dict.fromkeys(lines))


def _lines(problem: Problem, book: SpellBook) -> list[str]:
    if problem.reason == "unknown_spell":
        return [
            f"There is no tool named {problem.spell!r}. The available tools are:",
            *_all_signatures(book),
        ]
    if problem.reason == "missing_call":
        if problem.spell:
            return [f"A call to the tool {problem.spell!r} is required.", *_spell_lines(problem.spell, book)]
        return ["A tool call is required. The available tools are:", *_all_signatures(book)]
    if problem.reason == "malformed_json":
        why = "; ".join(problem.details)
        head = f"The arguments of your call to {problem.spell!r}" if problem.spell else "Your tool call"
        return [
            f"{head} were not valid JSON: {why}. Write the arguments as one complete JSON object.",
            *_spell_lines(problem.spell, book),
        ]
    if problem.reason == "repeated_call":  # repeats.py words it: the results, then the user's question
        return list(problem.details)
    if problem.reason == "ungrounded_arguments":
        return [
            "Your tool call uses values that appear nowhere in the conversation:",
            *(f"- {d}" for d in problem.details),
            'Call a tool only with values the user gave; when no tool fits, answer in text.',
        ]
    head = {
        "missing_arguments": "is missing required arguments",
        "unexpected_arguments": "has arguments the tool does not take",
        "invalid_arguments": "has invalid arguments",
    }[problem.reason]
    return [
        f"Your call to {problem.spell!r} {head}:",
        *(f"- {d}" for d in problem.details),
        *_spell_lines(problem.spell, book),
    ]


def _all_signatures(book: SpellBook) -> list[str]:
    return [signature(s) for s in book.spells.values()]


def _spell_lines(name: str | None, book: SpellBook) -> list[str]:
    spell = book.spells.get(name) if name else None
    if spell is None:
        return []
    return [f"The tool's parameters: {signature(spell)}", f"Its schema: {_compact(spell.parameters)}"]


def signature(spell: Spell) -> str:
    """`name(param: type, other?: type)`; `?` marks an optional parameter."""
    props = spell.parameters.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = spell.parameters.get("required")
    req = set(required) if isinstance(required, list) else set()
    params = ", ".join(
        f"{k}{'' if k in req else '?'}: {_type(v)}" for k, v in props.items() if isinstance(k, str)
    )
    line = f"{spell.name}({params})"
    return f"{line} - {spell.description}" if spell.description else line


def _type(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"][:20])
    t = schema.get("type")
    if isinstance(t, list):
        return " | ".join(str(x) for x in t)
    if t == "array" and isinstance(schema.get("items"), Mapping):
        return f"array of {_type(schema['items'])}"
    return str(t) if isinstance(t, str) else "any"


def _compact(schema: Mapping[str, Any]) -> str:
    try:
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return "{}"
    return text if len(text) <= 4000 else text[:3997] + "..."


def rejected_answer_text(message: Any, fmt: str = "hermes") -> str:
    """The answer as the model wrote it: its content, then each native call in the family's call format
    `fmt` (a `<tool_call>` block for Hermes and unknown families; arguments verbatim, even when they are
    broken JSON)."""
    msg = message if isinstance(message, Mapping) else {}
    parts = [content_text(msg.get("content"))]
    calls = msg.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        parts.append(_call_text(call) if fmt in ("hermes", "json", "constrained") or fmt not in families.FAMILIES
                     else _family_call_text(call, fmt))
    return "\n".join(p for p in parts if p)


def _family_call_text(call: Any, fmt: str) -> str:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return ""
    name = fn.get("name")
    args = fn.get("arguments")
    if not isinstance(args, str | Mapping) and args is not None:
        try:
            args = json.dumps(args, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            args = repr(args)
    return families.render_call(fmt, name if isinstance(name, str) else "", args)


def _call_text(call: Any) -> str:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return ""
    name = fn.get("name")
    args = fn.get("arguments")
    if not isinstance(args, str):
        try:
            args = json.dumps(args, ensure_ascii=False) if args is not None else "{}"
        except (TypeError, ValueError, RecursionError):
            args = repr(args)
    body = '{"name": ' + json.dumps(name if isinstance(name, str) else "", ensure_ascii=False)
    return f'<tool_call>\n{body}, "arguments": {args}}}\n</tool_call>'
