"""The answers a constrained proxy would have given with the grounding check (repair/grounding.py) off, read
from the traces of a bench_bfcl.py run (`--traces FILE`): a rule that asks again for text measured without a
second model run.

    python bench/bfcl_traces_replay.py TRACES.db --model-label SmolLM2-135M-Instruct.Q4_1 \\
        --out bench/results/bfcl_raw_heldout_nogrounding.jsonl

For each traced request of the column's mode (`--requested-mode`, "prompted" for "proxy constrained"): when a
round's calls were rejected as made up (SpellCallRejected, reason ungrounded_arguments, then a text round), the
answer without the check is that round's calls (the loop would have accepted them: grounding is the last check
of a free-choice constrained round); otherwise it is the answer the client got. Writes bench_bfcl.py --raw
records under `--column` for bench/bfcl_official.py. Exact while follow_up_calls is off (with it on, the held
call would have been followed up, which no trace shows).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench import bfcl_ast  # noqa: E402

DEFAULT_DATA = BENCH.parent.parent / "shared" / "benchmarks" / "bfcl"
CATEGORIES = ("simple", "multiple", "parallel", "irrelevance")


def without_grounding(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """(the message the client would have got with the check off, whether the check changed it)."""
    for omen in doc.get("omens", []):
        if omen.get("type") == "SpellCallRejected" and omen.get("reason") == "ungrounded_arguments":
            rounds = {r["number"]: r for r in doc.get("rounds", [])}
            answer = rounds.get(omen["round"], {}).get("answer")
            if isinstance(answer, dict) and answer.get("tool_calls"):
                return {"role": "assistant", "content": None, "tool_calls": answer["tool_calls"]}, True
    final = doc.get("answer") or {}
    return final.get("message"), False


def key(messages: Any, tools: Any) -> str:
    """An entry as its request shows it: two entries may ask the same question (irrelevance_77 and _81)."""
    names = sorted(t["function"]["name"] for t in tools or [] if isinstance(t, dict) and "function" in t)
    return json.dumps([messages, names], sort_keys=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", type=Path, help="the SQLite trace file of bench_bfcl.py --traces")
    p.add_argument("--model-label", required=True, help="the model field of the records (bench_bfcl.py's label)")
    p.add_argument("--requested-mode", default="prompted", help="the traced requests' spell_calling")
    p.add_argument("--column", default="proxy constrained - grounding")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--out", type=Path, required=True, help="JSON Lines appended to")
    args = p.parse_args()
    entries = {key(e.messages, e.tools): e for c in CATEGORIES for e in bfcl_ast.load(args.data, c)}
    db = sqlite3.connect(f"file:{args.traces}?mode=ro", uri=True)
    written = changed = 0
    with args.out.open("a", encoding="utf-8") as out:
        for (raw,) in db.execute("SELECT doc FROM traces ORDER BY seq"):
            doc = json.loads(raw)
            if doc.get("requested_mode") != args.requested_mode:
                continue
            request = doc.get("request") or {}
            entry = entries.get(key(request.get("messages"), request.get("tools")))
            if entry is None:
                continue
            message, moved = without_grounding(doc)
            changed += moved
            written += 1
            out.write(json.dumps({"model": args.model_label, "column": args.column, "id": entry.id,
                                  "category": entry.category, "message": message, "error": "",
                                  "seconds": round(doc.get("latency_ms", 0) / 1000, 3)}) + "\n")
    print(f"{written} answers written to {args.out}, {changed} changed by turning grounding off")


if __name__ == "__main__":
    main()
