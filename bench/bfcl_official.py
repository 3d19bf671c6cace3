"""The official BFCL evaluator (the `bfcl-eval` package) over the answers bench/bench_bfcl.py collected, beside
our own checker (bench/bfcl_ast.py), and a table of the entries where the two disagree.

    python3 -m venv bench/.venv-bfcl
    bench/.venv-bfcl/bin/pip install --no-deps bfcl-eval==2026.3.23
    bench/.venv-bfcl/bin/pip install -r bench/requirements-bfcl.txt
    bench/.venv-bfcl/bin/python bench/bfcl_official.py [--raw bench/results/bfcl_answers_first20.jsonl ...]
                                                       [--out bench/results/bfcl_official.md]

Runs in its own venv (bfcl-eval pins numpy, tree-sitter, SDKs...): it imports nothing of sanctum_proxy, only
bfcl_ast.py (pure). Each answer goes through bfcl-eval's own per-entry functions, the ones its
`bfcl evaluate` runs: `_evaluate_single_ast_entry` (decode_ast of the OpenAI function-calling handler, then
`ast_checker`) for simple / multiple / parallel, `_evaluate_single_relevance_entry` for irrelevance, with the
question and possible answer taken from bfcl-eval's own data files by id (checked against our copy).
No request is made: the handler's client gets a dummy key and is never used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bfcl_ast

BENCH = Path(__file__).resolve().parent
DEFAULT_RAW = BENCH / "results" / "bfcl_answers_first20.jsonl"
DEFAULT_OUT = BENCH / "results" / "bfcl_official.md"
DEFAULT_DATA = BENCH.parent.parent / "shared" / "benchmarks" / "bfcl"
# A registry entry whose handler is the OpenAI Chat Completions one in function-calling mode, with BFCL's
# `.` -> `_` name rule for OpenAI-style tool names (our tools are named the same way): the model name only
# selects those two rules in the checker.
REGISTRY_MODEL = "openbmb/MiniCPM-SALA-FC"
ORDER = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")


@dataclass
class Verdict:
    model: str
    column: str
    id: str
    category: str
    ours: bool
    ours_why: str
    official: bool
    official_why: str
    seconds: float
    answer: Any


class Official:
    """bfcl-eval's checker, loaded once."""

    def __init__(self) -> None:
        os.environ.setdefault("OPENAI_API_KEY", "unused-no-request-is-made")
        from bfcl_eval.constants.enums import Language, ReturnFormat
        from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
        from bfcl_eval.eval_checker import eval_runner
        from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

        config = MODEL_CONFIG_MAPPING[REGISTRY_MODEL]
        self.handler = config.model_handler(model_name=config.model_name, temperature=0,
                                            registry_name=REGISTRY_MODEL, is_fc_model=config.is_fc_model)
        self.model_name = REGISTRY_MODEL.replace("/", "_")  # how bfcl evaluate passes it on
        self.runner, self.language, self.format = eval_runner, Language.PYTHON, ReturnFormat.PYTHON
        self.prompts: dict[str, dict[str, Any]] = {}
        self.answers: dict[str, Any] = {}
        for ours, theirs in bfcl_ast.BFCL_CATEGORIES.items():
            for entry in load_dataset_entry(theirs, include_prereq=False, include_language_specific_hint=False):
                self.prompts[entry["id"]] = entry
            if ours != "irrelevance":
                for answer in load_ground_truth_entry(theirs):
                    self.answers[answer["id"]] = answer["ground_truth"]

    def check(self, category: str, entry_id: str, result: Any) -> tuple[bool, str]:
        theirs = bfcl_ast.BFCL_CATEGORIES[category]
        prompt = self.prompts[entry_id]
        try:
            if category == "irrelevance":
                out = self.runner._evaluate_single_relevance_entry(self.handler, entry_id, result, prompt,
                                                                   self.model_name, theirs)
            else:
                out = self.runner._evaluate_single_ast_entry(self.handler, entry_id, result,
                                                             self.answers[entry_id], prompt, self.model_name,
                                                             theirs, self.language, self.format)
        except Exception as exc:  # noqa: BLE001 - `bfcl evaluate` would stop here; we count a fail and say why
            return False, f"checker raised {type(exc).__name__}: {exc}"[:160]
        if out["valid"]:
            return True, ""
        return False, f"{out.get('error_type', '')}: {' '.join(map(str, out.get('error', [])))}"[:160]


def read_raw(paths: list[Path]) -> list[dict[str, Any]]:
    """Records in file order; a later record for the same (model, column, id) replaces an earlier one.
    `PATH=LABEL` adds " (LABEL)" to that file's column names (a rerun beside the run it repeats)."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for given in paths:
        path, _, label = str(given).partition("=")
        with Path(path).open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    if label:
                        record["column"] += f" ({label})"
                    latest[(record["model"], record["column"], record["id"])] = record
    return list(latest.values())


def id_check(official: Official, ours: dict[str, bfcl_ast.Entry]) -> list[str]:
    """Ids of ours that bfcl-eval does not have, or whose question or functions differ from its copy."""
    bad = []
    for entry_id, entry in ours.items():
        theirs = official.prompts.get(entry_id)
        if theirs is None or theirs["question"][0] != entry.messages or theirs["function"] != entry.functions:
            bad.append(entry_id)
        elif entry.answers is not None and official.answers.get(entry_id) != entry.answers:
            bad.append(entry_id)
    return bad


def score(records: list[dict[str, Any]], official: Official,
          ours: dict[str, bfcl_ast.Entry]) -> list[Verdict]:
    out = []
    for r in records:
        entry = ours[r["id"]]
        message = r["message"]
        calls = bfcl_ast.decode_calls(message) if message is not None else None
        ok, why = bfcl_ast.check(entry, calls)
        result = bfcl_ast.bfcl_result(message, r["error"])
        official_ok, official_why = official.check(r["category"], r["id"], result)
        out.append(Verdict(r["model"], r["column"], r["id"], r["category"], ok, r["error"] or why, official_ok,
                           official_why, r["seconds"], result))
    return out


def pct(passed: int, seen: int) -> str:
    return f"{passed / seen:.0%}" if seen else "–"


def report(verdicts: list[Verdict], args: argparse.Namespace, mismatched: list[str]) -> str:
    models = list(dict.fromkeys(v.model for v in verdicts))
    cats = [c for c in ORDER if any(v.category == c for v in verdicts)]
    lines = [
        "# BFCL through sanctum-proxy: the official evaluator (bfcl-eval) beside our checker",
        "",
        f"`bench/.venv-bfcl/bin/python bench/bfcl_official.py --raw {' '.join(map(str, args.raw_shown))}` — "
        "bfcl-eval 2026.3.23's own per-entry checker (`_evaluate_single_ast_entry` / "
        "`_evaluate_single_relevance_entry`, handler: OpenAI Chat Completions in FC mode) over the answers "
        "`bench/bench_bfcl.py --raw` saved. Each cell: **official** / ours (bench/bfcl_ast.py). "
        "Entries: those the raw files answer (BFCL v4 ids); ids, questions, functions and possible answers "
        f"checked identical to bfcl-eval's own data files ({len(mismatched)} differ"
        f"{': ' + ', '.join(mismatched[:5]) if mismatched else ''}).",
        "",
    ]
    for model in models:
        mine = [v for v in verdicts if v.model == model]
        columns = list(dict.fromkeys(v.column for v in mine))
        seen = {c: len({v.id for v in mine if v.category == c}) for c in cats}
        lines += [f"## {model}", "",
                  "entries (any column): " + ", ".join(f"{c} {seen[c]}" for c in cats), "",
                  "| column | " + " | ".join(f"{c}" for c in cats) + " | mean of categories | answers | "
                  "mean s/request | disagreements |",
                  "|---|" + "---:|" * len(cats) + "---:|---:|---:|---:|"]
        for column in columns:
            rows = [v for v in mine if v.column == column]
            cells, official_means, our_means = [], [], []
            for c in cats:
                in_cat = [v for v in rows if v.category == c]
                official_passed = sum(v.official for v in in_cat)
                our_passed = sum(v.ours for v in in_cat)
                cells.append(f"**{pct(official_passed, len(in_cat))}** / {pct(our_passed, len(in_cat))}")
                if in_cat:
                    official_means.append(official_passed / len(in_cat))
                    our_means.append(our_passed / len(in_cat))
            mean = (f"**{statistics.mean(official_means):.0%}** / {statistics.mean(our_means):.0%}"
                    if official_means else "–")
            disagree = sum(v.ours != v.official for v in rows)
            lines.append(f"| {column} | " + " | ".join(cells) + f" | {mean} | {len(rows)} | "
                         f"{statistics.mean(v.seconds for v in rows):.2f} | {disagree} |")
        lines += ["", "By half (bfcl_ast.half: even entries tune, odd ones are held out), official (passed/asked):", "",
                  "| column | half | " + " | ".join(cats) + " | mean of categories |",
                  "|---|---|" + "---:|" * len(cats) + "---:|"]
        for column in columns:
            for part in bfcl_ast.HALVES:
                rows = [v for v in mine if v.column == column and bfcl_ast.half(v.id) == part]
                shares = [(sum(v.official for v in in_cat), len(in_cat))
                          for in_cat in ([v for v in rows if v.category == c] for c in cats)]
                means = [passed / seen for passed, seen in shares if seen]
                lines.append(f"| {column} | {part} | "
                             + " | ".join(f"{pct(*share)} ({share[0]}/{share[1]})" if share[1] else "–"
                                          for share in shares)
                             + f" | {f'{statistics.mean(means):.0%}' if means else '–'} |")
        lines.append("")
    split = [v for v in verdicts if v.ours != v.official]
    lines += ["## Where the two checkers disagree", ""]
    if not split:
        lines.append("Nowhere: every answer got the same verdict from both.")
    else:
        lines += ["| model | column | entry | official | ours | answer (as bfcl-eval's result) |",
                  "|---|---|---|---|---|---|"]
        for v in split:
            answer = json.dumps(v.answer, ensure_ascii=False)
            lines.append(f"| {v.model} | {v.column} | {v.id} | "
                         f"{'pass' if v.official else 'fail: ' + _cell(v.official_why)} | "
                         f"{'pass' if v.ours else 'fail: ' + _cell(v.ours_why)} | `{_cell(answer[:140])}` |")
    return "\n".join(lines) + "\n"


PERTURBATIONS = ("as given", "int as float", "float as int", "bool as int", "string upper-cased", "number as string",
                 "list ints as floats", "list floats as ints", "list strings upper-cased", "dict ints as floats",
                 "optional sent as null")


def perturbed(call: dict[str, dict[str, list[Any]]], how: str) -> dict[str, str]:
    """One possible answer as a model's call (each argument its first acceptable value, optional ones left out),
    changed one way; in bfcl-eval's result shape."""
    (name, params), = call.items()
    args: dict[str, Any] = {}
    for key, acceptable in params.items():
        value = next((a for a in acceptable if a != ""), "")
        if value == "":
            if how == "optional sent as null":
                args[key] = None
            continue
        if how == "int as float" and type(value) is int:
            value = float(value)
        elif how == "float as int" and type(value) is float and value.is_integer():
            value = int(value)
        elif how == "bool as int" and type(value) is bool:
            value = int(value)
        elif how == "string upper-cased" and isinstance(value, str):
            value = value.upper() + "."
        elif how == "number as string" and type(value) in (int, float):
            value = str(value)
        elif how == "list ints as floats" and isinstance(value, list):
            value = [float(v) if type(v) is int else v for v in value]
        elif how == "list floats as ints" and isinstance(value, list):
            value = [int(v) if type(v) is float and v.is_integer() else v for v in value]
        elif how == "list strings upper-cased" and isinstance(value, list):
            value = [v.upper() if isinstance(v, str) else v for v in value]
        elif how == "dict ints as floats" and isinstance(value, dict):
            value = {k: float(v[0]) if isinstance(v, list) and v and type(v[0]) is int else v for k, v in value.items()}
        args[key] = value
    return {bfcl_ast.openai_name(name): json.dumps(args)}


def probe(official: Official, data: Path) -> str:
    """Both checkers on synthetic answers made from every possible answer of the AST categories: where their
    rules differ, whatever a model happens to write."""
    lines, total = [], 0
    for category in ("simple", "multiple", "parallel", "parallel_multiple"):
        for entry in bfcl_ast.load(data, category):
            assert entry.answers is not None
            for how in PERTURBATIONS:
                result = [perturbed(call, how) for call in entry.answers]
                calls = [{name: json.loads(args)} for r in result for name, args in r.items()]
                ours = bfcl_ast.check(entry, calls)
                theirs = official.check(category, entry.id, result)
                total += 1
                if ours[0] != theirs[0]:
                    lines.append(f"{entry.id} ({how}): official {theirs}, ours {ours}")
    return f"{total} synthetic answers, {len(lines)} verdicts differ\n" + "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="bfcl-eval's checker over bench_bfcl.py's saved answers")
    p.add_argument("--raw", type=Path, nargs="+", default=[DEFAULT_RAW],
                   help="JSON Lines from `bench_bfcl.py --raw` (default results/bfcl_answers_first20.jsonl); "
                        "PATH=LABEL adds ' (LABEL)' to that file's column names")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the report (default results/bfcl_official.md;"
                                                                  " '-' prints only)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="our BFCL copy (../shared/benchmarks/bfcl)")
    p.add_argument("--json", type=Path, help="also write every verdict of both checkers here (JSON Lines)")
    p.add_argument("--probe", action="store_true",
                   help="no answers: both checkers on every possible answer of the AST categories, changed in "
                        f"{len(PERTURBATIONS)} ways (ints as floats, strings upper-cased...); prints where they differ")
    args = p.parse_args(argv)
    try:
        official = Official()
    except ImportError as exc:
        print(f"bfcl_official: bfcl-eval not importable ({exc}); run me with bench/.venv-bfcl/bin/python "
              "(install: see this file's docstring)")
        return 2
    if args.probe:
        print(probe(official, args.data))
        return 0
    records = read_raw(args.raw)
    if not records:
        print("bfcl_official: no answers in", ", ".join(map(str, args.raw)))
        return 1
    ours: dict[str, bfcl_ast.Entry] = {}
    for category in {r["category"] for r in records}:
        for entry in bfcl_ast.load(args.data, category):
            ours[entry.id] = entry
    used = {r["id"] for r in records}
    mismatched = id_check(official, {i: e for i, e in ours.items() if i in used})
    verdicts = score(records, official, ours)
    args.raw_shown = [str(path).replace(str(BENCH.parent) + "/", "") for path in args.raw]
    text = report(verdicts, args, mismatched)
    print(text)
    if str(args.out) != "-":
        args.out.write_text(text, encoding="utf-8")
    if args.json:
        with args.json.open("w", encoding="utf-8") as handle:
            for v in verdicts:
                handle.write(json.dumps(v.__dict__, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
