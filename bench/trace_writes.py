"""CPU the trace writer spends storing one agent request's trace, by SQLite page size and by how many traces a commit
holds, for this tree and others (`--tree DIR`, a checkout or `git archive` of sanctum_proxy), in the same rounds.

    python bench/trace_writes.py [--tree DIR ...] [--docs 300] [--rounds 3] [--keep 200]

Each cell: ms of process CPU a document over `--docs` added to a fresh store, the median of the rounds; compare
the cells of one run (the trees run in turn each round). One trace a commit is the writer under requests that come
apart; eight, one 20 ms gather (recorder.GATHER_SECONDS) of sequential requests.

The second table is a store in its steady state, as a proxy runs for days: full (`--keep` traces, the count
budget standing in for the byte budget), each commit of eight pruned back to `--keep` (the tree's own page size):
what adding a document costs, and what removing one does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGES = (4096, 16384, 65536)
BATCHES = (1, 8)


def bodies() -> dict[str, object]:
    from agent_bodies import chat_turn, grown
    small = {"model": "m", "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
    return {"small body": small, "opencode turn": chat_turn("opencode"), "qwen-code turn": chat_turn("qwen-code"),
            "qwen-code after 40 tool rounds": grown(chat_turn("qwen-code"), 40)}


def child(docs: int, keep: int) -> None:
    """Runs in the tree under test: prints {"pages": {row: {page: {batch: ms a document}}},
    "steady": {row: {"add": ms, "prune": ms a document}}}."""
    import orjson

    from sanctum_proxy.state import trace_store
    from sanctum_proxy.state.traces import compacted

    def trace(body: object) -> object:
        request = orjson.loads(orjson.dumps(body))
        return compacted({
            "object": "sanctum.trace", "id": uuid.uuid4().hex, "request_id": None, "created": time.time(),
            "time": "", "model": "m", "upstream": "u", "mode": "native", "requested_mode": "auto",
            "protocol": "chat", "stream": False, "outcome": "clean", "status": 200, "latency_ms": 1.0, "usage": None,
            "request": request, "omens": [], "answer": None, "error": None, "bodies": True,
            "rounds": [{"number": 1, "sent": {**request, "stream": False}, "answer": {"role": "assistant"}}]})

    out: dict[str, dict[int, dict[int, float]]] = {}
    steady: dict[str, dict[str, float]] = {}
    own_page = trace_store.PAGE_SIZE
    for name, body in bodies().items():
        made = [trace(body) for _ in range(docs + 16)]
        trace_store.PAGE_SIZE = own_page
        steady[name] = kept_steady(trace_store.TraceStore(tempfile.mkdtemp() + "/t.sqlite3",
                                                          journal_limit=64 * 1024 * 1024), made, keep)
        for page in PAGES:
            for batch in BATCHES:
                trace_store.PAGE_SIZE = page
                store = trace_store.TraceStore(tempfile.mkdtemp() + "/t.sqlite3", journal_limit=64 * 1024 * 1024)
                store.add(made[:16])  # warm
                start = time.process_time()
                for i in range(16, len(made), batch):
                    store.add(made[i:i + batch])
                out.setdefault(name, {}).setdefault(page, {})[batch] = (time.process_time() - start) / docs * 1e3
                store.close()
    print(json.dumps({"pages": out, "steady": steady}))


def kept_steady(store: Any, made: list[Any], keep: int) -> dict[str, float]:
    """Filled past `keep`, then batches of eight added and pruned back to `keep`: ms a document of each."""
    def fresh(i: int) -> Any:
        return {**made[i % len(made)], "id": uuid.uuid4().hex, "created": time.time()}

    for i in range(0, keep + 64, 8):
        store.add([fresh(i + j) for j in range(8)])
    add = prune = 0.0
    count = 0
    for i in range(0, len(made), 8):
        docs = [fresh(i + j) for j in range(8)]
        began = time.process_time()
        store.add(docs)
        added = time.process_time()
        store.prune(keep, 0.0)
        prune += time.process_time() - added
        add += added - began
        count += len(docs)
    store.close()
    return {"add": add / count * 1e3, "prune": prune / count * 1e3}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tree", action="append", default=[], type=Path)
    p.add_argument("--docs", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=int, default=200, help="traces a steady-state store holds")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.docs, args.keep)
        return 0
    trees = {"this tree": ROOT, **{t.name: t.resolve() for t in args.tree}}
    runs: dict[str, list[dict[str, dict[str, dict[str, float]]]]] = {}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{Path(__file__).parent}"}
            done = subprocess.run([sys.executable, __file__, "--child", "--docs", str(args.docs), "--keep",
                                   str(args.keep)], env=env,
                                  capture_output=True, text=True, check=True)
            runs.setdefault(name, []).append(json.loads(done.stdout))
    lines = ["| trees | request | " + " | ".join(f"{pg // 1024} KB pages, {b} a commit" for pg in PAGES
                                                  for b in BATCHES) + " |",
             "|---|---|" + "---:|" * (len(PAGES) * len(BATCHES))]
    for name, tree_runs in runs.items():
        for row in tree_runs[0]["pages"]:
            cells = [statistics.median(r["pages"][row][str(pg)][str(b)] for r in tree_runs)
                     for pg in PAGES for b in BATCHES]
            lines.append(f"| {name} | {row} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    lines += ["", f"Steady state, {args.keep} traces kept, eight a commit, ms a document:", "",
              "| trees | request | add | prune | both |", "|---|---|---:|---:|---:|"]
    for name, tree_runs in runs.items():
        for row in tree_runs[0]["steady"]:
            add, prune = (statistics.median(r["steady"][row][k] for r in tree_runs) for k in ("add", "prune"))
            lines.append(f"| {name} | {row} | {add:.3f} | {prune:.3f} | {add + prune:.3f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
