"""One column against another on the entries both answered, per model, half and category, from the official
verdicts `bfcl_official.py --json FILE` wrote: the comparison a rule is kept or dropped on (issue 31).

    python bench/bfcl_paired.py VERDICTS.jsonl "proxy constrained|proxy constrained + follow-up" ...

Each pair is "BASE|OTHER"; a cell reads `base -> other / entries`, bfcl-eval's passes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bfcl_ast  # noqa: E402


def paired(verdicts: list[dict[str, object]], base: str, other: str) -> list[str]:
    by = {(str(v["model"]), str(v["column"]), str(v["id"])): v for v in verdicts}
    lines = []
    for model in sorted({str(v["model"]) for v in verdicts}):
        cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for (m, column, entry), v in by.items():
            mine = by.get((m, base, entry))
            if m != model or column != other or mine is None:
                continue
            cell = cells[bfcl_ast.half(entry), str(v["category"])]
            cell[0] += bool(mine["official"])
            cell[1] += bool(v["official"])
            cell[2] += 1
        if cells:
            lines.append(f"| {model} | {other} vs {base} | " + ", ".join(
                f"{half} {category} {a} -> {b} / {n}" for (half, category), (a, b, n) in sorted(cells.items())) + " |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("verdicts", type=Path, help="bfcl_official.py --json output")
    p.add_argument("pairs", nargs="+", help='"BASE|OTHER" column names')
    args = p.parse_args()
    verdicts = [json.loads(line) for line in args.verdicts.read_text(encoding="utf-8").splitlines() if line]
    print("| model | columns | official passes, base -> other / entries answered by both |")
    print("|---|---|---|")
    for pair in args.pairs:
        base, _, other = pair.partition("|")
        print("\n".join(paired(verdicts, base, other)))


if __name__ == "__main__":
    main()
