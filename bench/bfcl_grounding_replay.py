"""What the grounding check (sanctum_proxy/repair/grounding.py) as it is now would make of answers recorded
earlier: a rule for made-up calls measured without a model run.

    python bench/bfcl_grounding_replay.py bench/results/bfcl_answers_heldout_21_45.jsonl [--column "proxy constrained"]

For each recorded answer of the column (bench_bfcl.py --raw): when `ungrounded` flags every call, the loop
would have asked again without tools, so the answer becomes text (right on irrelevance, wrong elsewhere);
otherwise its verdict stands. Exact for a rule stricter than the one the answers were recorded under (a
flagged answer was never recorded, so a looser rule cannot be replayed). Also prints how many of BFCL's
reference calls (simple, multiple, parallel) the rule would flag: each one a right call lost. Scored by
bench/bfcl_ast.py (it agrees with bfcl-eval on every answer so far: results/bfcl_official*.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench import bfcl_ast  # noqa: E402
from sanctum_proxy.repair.grounding import Evidence, ungrounded  # noqa: E402

DEFAULT_DATA = BENCH.parent.parent / "shared" / "benchmarks" / "bfcl"


def flagged(entry: bfcl_ast.Entry, calls: list[dict[str, Any]]) -> bool:
    """Whether the loop would answer in text: every call made up (grounding.made_up)."""
    parameters = {t["function"]["name"]: t["function"].get("parameters", {}) for t in entry.tools}
    evidence = Evidence.of(entry.messages)
    return bool(calls) and all(
        ungrounded(_loads(c["function"]["arguments"]), parameters.get(c["function"]["name"], {}), evidence)
        for c in calls)


def reference_flags(entries: dict[str, bfcl_ast.Entry]) -> tuple[int, int]:
    """(flagged, all) over the reference calls: each call's first acceptable value of every argument."""
    flagged_calls = total = 0
    for entry in entries.values():
        parameters = {t["function"]["name"]: t["function"].get("parameters", {}) for t in entry.tools}
        evidence = Evidence.of(entry.messages)
        for answer in entry.answers or []:
            for name, accepted in answer.items():
                args = {k: firsts[0] for k, v in accepted.items() if (firsts := [a for a in v if a != ""])}
                total += 1
                flagged_calls += bool(ungrounded(args, parameters[bfcl_ast.openai_name(name)], evidence))
    return flagged_calls, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("raw", type=Path, nargs="+", help="JSON Lines from bench_bfcl.py --raw")
    p.add_argument("--column", default="proxy constrained")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = p.parse_args()
    entries = {e.id: e for c in ("simple", "multiple", "parallel", "irrelevance")
               for e in bfcl_ast.load(args.data, c)}
    was, now, seen = Counter[tuple[str, str]](), Counter[tuple[str, str]](), Counter[tuple[str, str]]()
    changed: list[str] = []
    for path in args.raw:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["column"] != args.column:
                continue
            entry, message = entries[record["id"]], record["message"] or {}
            right, _ = bfcl_ast.check(entry, bfcl_ast.decode_calls(message))
            after = entry.category == "irrelevance" if flagged(entry, message.get("tool_calls") or []) else right
            key = (record["model"], entry.category)
            seen[key] += 1
            was[key] += right
            now[key] += after
            if after != right:
                changed.append(f"{record['model']} {entry.id}: {'right' if right else 'wrong'} -> "
                               f"{'right' if after else 'wrong'}")
    print("| model | category | answers | right as recorded | right under today's grounding |")
    print("|---|---|---:|---:|---:|")
    for key in sorted(seen):
        print(f"| {key[0]} | {key[1]} | {seen[key]} | {was[key]} | {now[key]} |")
    print("\nChanged verdicts:", ", ".join(changed) or "none")
    flagged_refs, refs = reference_flags(entries)
    print(f"BFCL reference calls flagged: {flagged_refs} of {refs}")


def _loads(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError:
        return None


if __name__ == "__main__":
    main()
