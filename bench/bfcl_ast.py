"""BFCL (Berkeley Function Calling Leaderboard) data, its function docs as OpenAI tools, and BFCL-style AST
checking, as described in ../shared/benchmarks/bfcl/SCORING.md (rules re-implemented from that text; none of
BFCL's code is copied). Pure: no I/O except `load`.

Conversion: dict->object, float->number, tuple->array, any->no type, unknown/missing->string; recursive
through properties and items; `optional` stripped, `default` dropped, `required` names without a property
dropped; function names get `.` -> `_` (OpenAI's name pattern), the checker compares against the same.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None, "string": "string",
         "integer": "integer", "boolean": "boolean", "array": "array", "object": "object", "number": "number",
         "bool": "boolean", "list": "array"}
PY_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                             "tuple": list, "dict": dict, "any": str}
FILES = {"simple": "BFCL_v4_simple_python.json", "multiple": "BFCL_v4_multiple.json",
         "parallel": "BFCL_v4_parallel.json", "parallel_multiple": "BFCL_v4_parallel_multiple.json",
         "irrelevance": "BFCL_v4_irrelevance.json"}


@dataclass(frozen=True)
class Entry:
    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    answers: list[dict[str, dict[str, list[Any]]]] | None  # None: irrelevance (no call is right)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [to_tool(f) for f in self.functions]


def load(root: Path, category: str, limit: int | None = None) -> list[Entry]:
    """The first `limit` entries of a category (JSON Lines), with their possible answers."""
    name = FILES[category]
    questions = _lines(root / "data" / name, limit)
    answers_path = root / "possible_answer" / name
    answers = ({a["id"]: a["ground_truth"] for a in _lines(answers_path, None)} if answers_path.is_file()
               else {})
    return [Entry(q["id"], category, q["question"][0], q["function"],
                  answers.get(q["id"]) if category != "irrelevance" else None) for q in questions]


HALVES = ("tuning", "held-out")
_INDEX = re.compile(r"_(\d+)(?:-\d+)*$")


def half(entry_id: str) -> str:
    """Which half of its category an entry is in: "tuning" (even entries: `simple_python_0`, `_2`, ...; the rules
    of tier 2 and constrained decoding may be chosen on these) or "held-out" (odd: what a rule is judged on)."""
    found = _INDEX.search(entry_id)
    return HALVES[int(found.group(1)) % 2] if found else HALVES[0]


def _lines(path: Path, limit: int | None) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                out.append(json.loads(line))
                if limit is not None and len(out) >= limit:
                    break
    return out


# --- conversion ------------------------------------------------------------------------------------------


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def to_tool(function: dict[str, Any]) -> dict[str, Any]:
    parameters = to_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    parameters["type"] = "object"
    return {"type": "function", "function": {"name": openai_name(function["name"]),
                                             "description": function.get("description", ""),
                                             "parameters": parameters}}


def to_schema(node: dict[str, Any]) -> dict[str, Any]:
    """One BFCL schema node as JSON Schema (recursive)."""
    out: dict[str, Any] = {}
    kind = TYPES.get(node.get("type", "string"), "string")
    if kind is not None:
        out["type"] = kind
    for key in ("description", "enum", "format", "maximum", "minimum", "minItems", "maxItems"):
        if key in node:
            out[key] = node[key]
    if isinstance(node.get("properties"), dict):
        out["properties"] = {name: to_schema(child) for name, child in node["properties"].items()}
        required = [r for r in node.get("required") or [] if r in out["properties"]]
        if required:
            out["required"] = required
    if isinstance(node.get("items"), dict):
        out["items"] = to_schema(node["items"])
    return out


# --- checking --------------------------------------------------------------------------------------------


def decode_calls(message: dict[str, Any]) -> list[dict[str, Any]] | None:
    """[{name: arguments}] from an OpenAI message's tool_calls; None when there are none or one does not
    decode to an object (BFCL: that is an AST failure, and a pass for irrelevance)."""
    calls = message.get("tool_calls") or []
    if not calls:
        return None
    out = []
    for call in calls:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            return None
        if not isinstance(arguments, dict):
            return None
        out.append({function.get("name", ""): arguments})
    return out


def check(entry: Entry, calls: list[dict[str, Any]] | None) -> tuple[bool, str]:
    """(passed, why not) under BFCL's AST rules for the entry's category."""
    if entry.answers is None:
        made = bool(calls) and any(args or name for c in calls for name, args in c.items())
        return (not made, "made a call" if made else "")
    if not calls:
        return False, "no decodable call"
    docs = {openai_name(f["name"]): f for f in entry.functions}
    if "parallel" in entry.category:
        return _parallel(docs, calls, entry.answers)
    if len(calls) != 1:
        return False, f"{len(calls)} calls, expected 1"
    return check_call(docs, calls[0], entry.answers[0])


def _parallel(docs: dict[str, Any], calls: list[dict[str, Any]],
              answers: list[dict[str, dict[str, list[Any]]]]) -> tuple[bool, str]:
    if len(calls) != len(answers):
        return False, f"{len(calls)} calls, expected {len(answers)}"
    unused = list(range(len(calls)))
    for answer in answers:
        match = next((i for i in unused if check_call(docs, calls[i], answer)[0]), None)
        if match is None:
            return False, f"no call matches {next(iter(answer))}"
        unused.remove(match)
    return True, ""


def check_call(docs: dict[str, Any], call: dict[str, Any],
               answer: dict[str, dict[str, list[Any]]]) -> tuple[bool, str]:
    (name, args), = call.items()
    (expected_name, expected), = answer.items()
    if name != openai_name(expected_name):
        return False, f"name {name!r}, expected {openai_name(expected_name)!r}"
    doc = docs.get(name)
    if doc is None:
        return False, f"unknown function {name!r}"
    params = doc.get("parameters") or {}
    properties = params.get("properties") or {}
    for required in params.get("required") or []:
        if required not in args:
            return False, f"missing required {required!r}"
    for key, value in args.items():
        if key not in properties or key not in expected:
            return False, f"unexpected parameter {key!r}"
        ok, why = check_value(properties[key], value, expected[key])
        if not ok:
            return False, f"{key}: {why}"
    for key, acceptable in expected.items():
        if key not in args and "" not in acceptable:
            return False, f"missing {key!r}"
    return True, ""


def check_value(doc: dict[str, Any], value: Any, acceptable: list[Any]) -> tuple[bool, str]:
    kind = doc.get("type", "string")
    if kind == "float" and type(value) is int:
        value = float(value)
    if not _type_ok(kind, value, acceptable):
        return False, f"type {type(value).__name__} for {kind}"
    if kind in ("array", "tuple") and isinstance(value, list) and isinstance(doc.get("items"), dict):
        # BFCL checks the items against each acceptable list in turn (an item may be a "variable" of that
        # list's own item type), and skips the check when an acceptable value is not a list (e.g. "")
        item_kind = doc["items"].get("type", "string")
        lists = [a for a in acceptable if isinstance(a, list)]
        if item_kind in PY_TYPES and len(lists) == len(acceptable) and not any(
                all(_type_ok(item_kind, v, option) for v in value) for option in lists or [[]]):
            return False, f"an item is not {item_kind}"
    candidates = [a for a in acceptable if a != ""]
    wanted = PY_TYPES.get(kind)
    if wanted is not None and candidates and type(candidates[0]) is not wanted:
        # BFCL's "variable" case (the answers are not of the doc's type): compared as they are, not normalised
        ok = value in candidates
    elif isinstance(value, str):
        ok = normal(value) in [normal(a) for a in candidates if isinstance(a, str)]
    elif isinstance(value, list):
        ok = any(isinstance(a, list) and _list_equal(value, a) for a in candidates)
    elif isinstance(value, dict):
        ok = any(isinstance(a, dict) and _dict_ok(value, a) for a in candidates)
    else:
        ok = value in candidates
    return ok, "" if ok else f"value {value!r} not in {candidates!r}"


def _type_ok(kind: str, value: Any, acceptable: list[Any]) -> bool:
    """Strict: an int for a float passes only at the top level, where check_value has made it a float
    (bfcl-eval does not coerce array items: [1, 3] for an array of float fails, simple_python_13)."""
    wanted = PY_TYPES.get(kind)
    if wanted is None or type(value) is wanted:
        return True
    first = next((a for a in acceptable if a != ""), "")
    return first != "" and type(value) is type(first)  # BFCL's "variable" case (e.g. None listed)


def normal(text: str) -> str:
    for ch in " ,./-_*^":
        text = text.replace(ch, "")
    return text.lower().replace("'", '"')


def _same(value: Any, expected: Any) -> bool:
    if isinstance(value, str) and isinstance(expected, str):
        return normal(value) == normal(expected)
    if isinstance(value, dict) and isinstance(expected, dict):
        return _dict_ok(value, expected)
    return type(value) is type(expected) and value == expected or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == expected)


def _list_equal(value: list[Any], expected: list[Any]) -> bool:
    return len(value) == len(expected) and all(_same(v, e) for v, e in zip(value, expected, strict=True))


def _dict_ok(value: dict[str, Any], expected: dict[str, Any]) -> bool:
    for key, item in value.items():
        options = expected.get(key)
        if options is None:
            return False
        options = options if isinstance(options, list) else [options]
        if not any(_same(item, o) for o in options if o != ""):
            return False
    return all(key in value or "" in (opts if isinstance(opts, list) else [opts])
               for key, opts in expected.items())


# --- glue to the official evaluator (bench/bfcl_official.py) ---------------------------------------------

BFCL_CATEGORIES = {"simple": "simple_python", "multiple": "multiple", "parallel": "parallel",
                   "parallel_multiple": "parallel_multiple", "irrelevance": "irrelevance"}
"""Our category names -> bfcl-eval's test category names (the data files' `BFCL_v4_<name>.json`)."""


def bfcl_result(message: dict[str, Any] | None, error: str) -> Any:
    """An answer as bfcl-eval's OpenAI function-calling handler records it in its result files (the `result`
    field its checker decodes): one `{name: arguments text}` per tool call; the message's content when
    `tool_calls` is absent or null; BFCL's "Error during inference: ..." text when the request failed."""
    if message is None:
        return f"Error during inference: {error or 'no answer'}"
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return message.get("content")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):  # the SDK's attribute access would have raised: content then
            return message.get("content")
        out.append({function.get("name"): function.get("arguments")})
    return out
