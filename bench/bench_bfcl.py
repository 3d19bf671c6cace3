"""Tool-calling quality on BFCL entries against a real llama-server (SmolLM2-135M, --jinja): the server
reached directly with native tools (the baseline) against sanctum-proxy in front of it, native / prompted /
auto, and constrained (prompted with `sanctum.constrain: always`, when the proxy has that setting).

    python bench/bench_bfcl.py [--quick] [--limit N] [--categories simple,multiple,parallel,irrelevance]
                               [--constrain-modes] [--columns NAME,NAME] [--model GGUF]
                               [--raw results/bfcl_raw.jsonl] [--results NAME|-]
                               [--data ../shared/benchmarks/bfcl]

Entries are interleaved: each one goes to every column before the next, so machine noise hits all alike.
Valid-call rate: answers whose calls all decode to JSON objects naming an offered tool (irrelevance excluded).
AST accuracy: BFCL's rules (bench/bfcl_ast.py; irrelevance passes when no call is made). A proxy error
(e.g. 422 when it surrenders) counts as no call. Writes bench/results/bfcl.{md,png}.

`--raw FILE` appends every answer (model, column, entry id, the message as returned, error, seconds) as JSON
Lines, for the official evaluator: `bench/bfcl_official.py` scores the same answers with bfcl-eval's checker.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bfcl_ast
import httpx
import servers

RESULTS = Path(__file__).parent / "results"
DEFAULT_DATA = servers.ROOT.parent / "shared" / "benchmarks" / "bfcl"
CATEGORIES = ("simple", "multiple", "parallel", "irrelevance")
COLUMNS: dict[str, dict[str, Any] | None] = {  # None: straight to llama-server
    "direct native": None,
    "proxy default": {},  # no sanctum controls: the settings a user gets without choosing any
    "proxy native": {"spell_calling": "native"},
    "proxy prompted": {"spell_calling": "prompted"},
    "proxy auto": {"spell_calling": "auto"},
    "proxy constrained": {"spell_calling": "prompted", "constrain": "always"},
}
# Issue 31's rule checks, run only when `--columns` names them: the controls of a column above on a proxy
# started with one setting changed (SERVER_SETTINGS), or tool_choice "required" (correction rounds).
RULE_COLUMNS: dict[str, dict[str, Any] | None] = {
    "proxy constrained + follow-up": {"spell_calling": "prompted", "constrain": "always"},
    "proxy default + tool_choice required": {"tool_choice": "required"},
    "proxy default + tool_choice required + fresh": {"tool_choice": "required"},
}
# Columns whose proxy runs with settings other than the defaults (env vars; one proxy per distinct set).
SERVER_SETTINGS: dict[str, dict[str, str]] = {
    "proxy constrained + follow-up": {"SANCTUM_FOLLOW_UP_CALLS": "true"},
    "proxy default + tool_choice required + fresh": {"SANCTUM_CORRECTION_CONTEXT": "fresh"},
}
# `--constrain-modes`: issue 6's comparison. A `tool_choice` key goes into the request body, not the controls.
CONSTRAIN_COLUMNS: dict[str, dict[str, Any] | None] = {
    "direct native": None,  # the report's baseline
    "prompted, constrain off": {"spell_calling": "prompted", "constrain": "off"},
    "prompted, constrain repair": {"spell_calling": "prompted", "constrain": "repair"},
    "prompted, constrain always": {"spell_calling": "prompted", "constrain": "always"},
    "constrain off, tool_choice required": {"spell_calling": "prompted", "constrain": "off",
                                            "tool_choice": "required"},
    "constrain repair, tool_choice required": {"spell_calling": "prompted", "constrain": "repair",
                                               "tool_choice": "required"},
}


@dataclass
class Tally:
    passed: Counter[str] = field(default_factory=Counter)
    seen: Counter[str] = field(default_factory=Counter)
    valid: int = 0
    callable_entries: int = 0
    errors: int = 0
    seconds: list[float] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    passed_half: Counter[tuple[str, str]] = field(default_factory=Counter)  # (category, half)
    seen_half: Counter[tuple[str, str]] = field(default_factory=Counter)

    def accuracy(self, category: str, half: str | None = None) -> float:
        if half is not None:
            seen = self.seen_half[category, half]
            return self.passed_half[category, half] / seen if seen else float("nan")
        return self.passed[category] / self.seen[category] if self.seen[category] else float("nan")


def ask(client: httpx.Client, url: str, entry: bfcl_ast.Entry, controls: dict[str, Any] | None,
        max_tokens: int, usage: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, float, str]:
    body: dict[str, Any] = {"model": "bench", "messages": entry.messages, "temperature": 0,
                            "max_tokens": max_tokens}
    if entry.functions:
        body["tools"] = entry.tools
    if controls is not None:
        controls = dict(controls)
        if "tool_choice" in controls and entry.functions:
            body["tool_choice"] = controls.pop("tool_choice")
        controls.pop("tool_choice", None)
        if controls:
            body["sanctum"] = controls
    start = time.perf_counter()
    try:
        response = client.post(f"{url}/chat/completions", json=body)
    except httpx.HTTPError as exc:
        return None, time.perf_counter() - start, f"transport: {type(exc).__name__}"
    took = time.perf_counter() - start
    if response.status_code != 200:
        return None, took, f"HTTP {response.status_code}"
    answer = response.json()
    if usage is not None and isinstance(answer.get("usage"), dict):  # token counts, for the latency notes
        usage.update({k: v for k, v in answer["usage"].items() if k in ("prompt_tokens", "completion_tokens")})
    return answer["choices"][0]["message"], took, ""


def score(tally: Tally, entry: bfcl_ast.Entry, message: dict[str, Any] | None, error: str) -> str:
    """Count one answer; returns why it failed ("" when it passed)."""
    calls = bfcl_ast.decode_calls(message) if message is not None else None
    tally.seen[entry.category] += 1
    tally.seen_half[entry.category, bfcl_ast.half(entry.id)] += 1
    if error:
        tally.errors += 1
        tally.reasons[error] += 1
    if entry.answers is not None:
        tally.callable_entries += 1
        names = {t["function"]["name"] for t in entry.tools}
        if calls and all(name in names for c in calls for name in c):
            tally.valid += 1
    ok, why = bfcl_ast.check(entry, calls)
    if ok:
        tally.passed[entry.category] += 1
        tally.passed_half[entry.category, bfcl_ast.half(entry.id)] += 1
    elif not error:
        tally.reasons[why if why.startswith(("no ", "made")) else why.split(":")[0][:40]] += 1
    return "" if ok else error or why


def template_note(client: httpx.Client, root_url: str) -> dict[str, Any]:
    """What llama-server's /props says of the model's chat template: its tool capabilities (when this build
    reports them) and the call family sanctum-proxy's `families.detect` reads from it."""
    from sanctum_proxy.codecs import families

    try:
        props = client.get(f"{root_url}/props").json()
    except (httpx.HTTPError, ValueError):
        return {"props": "unavailable"}
    template = props.get("chat_template")
    caps = props.get("chat_template_caps")
    return {"family": families.detect(template), "caps": caps,
            "mentions_tools": isinstance(template, str) and "tools" in template}


def chosen(args: argparse.Namespace) -> list[bfcl_ast.Entry]:
    """The entries asked: each category's from --skip on, only --half's when given, --limit of them; taken
    round-robin over categories, so that a time budget cut leaves every category about equally covered."""
    per_category = [bfcl_ast.load(args.data, c)[args.skip:] for c in args.categories]
    if args.half:
        per_category = [[e for e in row if bfcl_ast.half(e.id) == args.half] for row in per_category]
    per_category = [row[:args.limit] for row in per_category]
    return [e for row in itertools.zip_longest(*per_category) for e in row if e is not None]


def run(args: argparse.Namespace,
        columns: dict[str, dict[str, Any] | None]) -> tuple[dict[str, Tally], float]:
    from sanctum_proxy.upstreams.embedded import LlamaServer

    entries = chosen(args)
    if args.resume and args.raw and args.raw.is_file():
        done = answered(args.raw, model_label(args))
        entries = [e for e in entries if not all((name, e.id) in done for name in columns)]
        print(f"--resume: {len(entries)} entries left to ask", flush=True)
    tallies = {name: Tally() for name in columns}
    began = time.perf_counter()
    llama_server = LlamaServer(jinja=True, ctx_size=4096, threads=args.threads, model=args.model)
    raw = args.raw.open("a", encoding="utf-8") if args.raw else None
    settings = sorted({tuple(sorted(SERVER_SETTINGS.get(name, {}).items())) for name, c in columns.items()
                       if c is not None})
    with contextlib.ExitStack() as stack:
        llama = stack.enter_context(llama_server)
        proxies: dict[tuple[tuple[str, str], ...], servers.Child] = {}
        for number, extra in enumerate(settings):
            env = dict(extra)
            if args.traces:  # one trace file per proxy: traces.db, traces.1.db, ...
                path = args.traces if not extra else args.traces.with_suffix(f".{number}{args.traces.suffix}")
                env["SANCTUM_TRACES_PATH"] = str(path.resolve())
            proxies[extra] = stack.enter_context(servers.sanctum(llama.base_url, env=env))
        client = stack.enter_context(httpx.Client(timeout=args.timeout))
        args.template = template_note(client, llama.root_url)
        print(f"model {model_label(args)}: chat template {args.template}", flush=True)
        for number, entry in enumerate(entries, 1):
            if time.perf_counter() - began > args.minutes * 60:
                print(f"time budget of {args.minutes:g} min spent after {number - 1} entries", flush=True)
                break
            for name, controls in columns.items():
                url = (llama.base_url if controls is None
                       else proxies[tuple(sorted(SERVER_SETTINGS.get(name, {}).items()))].url)
                usage: dict[str, Any] = {}
                message, took, error = ask(client, url, entry, controls, args.max_tokens, usage)
                tallies[name].seconds.append(took)
                verdict = score(tallies[name], entry, message, error)
                if raw is not None:
                    raw.write(json.dumps({"model": model_label(args), "column": name, "id": entry.id,
                                          "category": entry.category, "message": message, "error": error,
                                          "seconds": round(took, 3), "usage": usage}) + "\n")
                    raw.flush()
                if args.verbose:
                    print(f"{entry.id} {name}: {took:.1f}s {verdict or 'pass'}", flush=True)
            if number % 10 == 0:
                print(f"{number}/{len(entries)} entries, {time.perf_counter() - began:.0f}s", flush=True)
    if raw is not None:
        raw.close()
    return tallies, time.perf_counter() - began


def answered(raw: Path, model: str) -> set[tuple[str, str]]:
    """(column, entry id) pairs the raw file already holds for this model."""
    with raw.open(encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return {(r["column"], r["id"]) for r in records if r["model"] == model}


def model_label(args: argparse.Namespace) -> str:
    from sanctum_proxy.upstreams.embedded import MODEL_FILE

    return Path(args.model).name.removesuffix(".gguf") if args.model else MODEL_FILE.removesuffix(".gguf")


def report(tallies: dict[str, Tally], args: argparse.Namespace, took: float, notes: list[str]) -> str:
    base_name = "direct native" if "direct native" in tallies else next(iter(tallies))
    base = tallies[base_name]
    cats = list(args.categories)

    def cell(t: Tally, value: float, baseline: float) -> str:
        if t is base:
            return f"{value:.0%}"
        return f"{value:.0%} ({(value - baseline) * 100:+.0f})"

    lines = [
        "# BFCL tool-calling quality: llama-server direct vs through sanctum-proxy",
        "",
        f"`python bench/bench_bfcl.py{' --quick' if args.quick else ''}"
        f"{' --constrain-modes' if args.constrain_modes else ''} --limit {args.limit}"
        f"{f' --skip {args.skip}' if args.skip else ''}{f' --half {args.half}' if args.half else ''} --categories "
        f"{','.join(cats)}{' --model ' + str(args.model) if args.model else ''}` — {model_label(args)} on "
        f"llama-server (--jinja, {args.threads} threads; chat template: {args.template}), "
        f"temperature 0, "
        f"max_tokens {args.max_tokens}; up to {args.limit} entries per category, taken in turn within a "
        f"{args.minutes:g} min budget (entries scored: "
        f"{', '.join(f'{c} {base.seen[c]}' for c in cats)}); {took / 60:.1f} min on "
        f"{platform.machine()}. Figures in brackets: percentage points against {base_name} in the same "
        "run.",
        "",
        "| column | valid-call rate | " + " | ".join(f"{c} AST" for c in cats) + " | mean of categories | "
        "mean s/request | errors |",
        "|---|---:|" + "---:|" * len(cats) + "---:|---:|---:|",
    ]
    for name, t in tallies.items():
        valid = t.valid / t.callable_entries if t.callable_entries else float("nan")
        base_valid = base.valid / base.callable_entries if base.callable_entries else float("nan")
        mean = statistics.mean(t.accuracy(c) for c in cats)
        base_mean = statistics.mean(base.accuracy(c) for c in cats)
        lines.append(f"| {name} | {cell(t, valid, base_valid)} | "
                     + " | ".join(cell(t, t.accuracy(c), base.accuracy(c)) for c in cats)
                     + f" | {cell(t, mean, base_mean)} | {statistics.mean(t.seconds):.2f} | {t.errors} |")
    lines += ["", "The same answers by half (bfcl_ast.half: even entries of each category are the tuning half, odd "
              "ones held out; a rule is kept only when it does not lose on the held-out half):", "",
              "| column | half | " + " | ".join(f"{c} AST" for c in cats) + " | mean of categories |",
              "|---|---|" + "---:|" * len(cats) + "---:|"]
    for name, t in tallies.items():
        for part in bfcl_ast.HALVES:
            scores = [t.accuracy(c, part) for c in cats]
            known = [x for x in scores if x == x]  # (nan: no entry of that half scored)
            mean = f"{statistics.mean(known):.0%}" if known else "–"
            lines.append(f"| {name} | {part} | " + " | ".join("–" if x != x else f"{x:.0%}" for x in scores)
                         + f" | {mean} |")
    lines += ["", "Most common failures per column:", ""]
    for name, t in tallies.items():
        lines.append(f"- {name}: " + ", ".join(f"{why} ×{n}" for why, n in t.reasons.most_common(4)))
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def plot(tallies: dict[str, Tally], categories: list[str], path: Path, title: str) -> None:
    plt = servers.pyplot()
    if plt is None:
        return

    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(tallies)
    for i, (name, t) in enumerate(tallies.items()):
        ax.bar([x + i * width for x in range(len(categories))], [t.accuracy(c) for c in categories], width,
               label=name)
    ax.set_xticks([x + width * (len(tallies) - 1) / 2 for x in range(len(categories))], categories)
    ax.set_ylabel("BFCL AST accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.suptitle(f"{title} on BFCL: llama-server direct vs through sanctum-proxy")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    servers.exit_on_sigterm()
    args = parse(argv)
    from sanctum_proxy.config import Settings
    from sanctum_proxy.upstreams.embedded import EmbeddedUnavailable, find_llama_server, find_model

    try:
        find_llama_server()
        find_model()
    except EmbeddedUnavailable as exc:
        print(f"bench_bfcl: skipped, no llama-server: {exc}")
        return 0
    if not args.data.is_dir():
        print(f"bench_bfcl: skipped, no BFCL data at {args.data}")
        return 0
    notes = []
    columns = dict(CONSTRAIN_COLUMNS if args.constrain_modes else COLUMNS)
    if args.columns:
        known = {**columns, **RULE_COLUMNS}
        unknown = set(args.columns) - set(known)
        if unknown:
            print(f"bench_bfcl: unknown columns {sorted(unknown)}; known: {', '.join(known)}")
            return 2
        columns = {k: known[k] for k in args.columns}
    if "constrain" not in Settings.model_fields and "proxy constrained" in columns:
        del columns["proxy constrained"]
        notes.append("proxy constrained: skipped, this sanctum-proxy has no `constrain` setting")
    tallies, took = run(args, columns)
    text = report(tallies, args, took, notes)
    print(text)
    name = args.results or ("bfcl_constrain" if args.constrain_modes else "bfcl")
    if not args.quick and name != "-":
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{name}.md").write_text(text, encoding="utf-8")
        plot(tallies, list(args.categories), RESULTS / f"{name}.png", model_label(args))
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="BFCL quality, llama-server direct vs through sanctum-proxy")
    p.add_argument("--quick", action="store_true", help="1 entry per category (CI); results not written")
    p.add_argument("--limit", type=int, help="entries per category (default 10; quick 1)")
    p.add_argument("--skip", type=int, default=0,
                   help="leave out each category's first N entries (a held-out set for a rule tuned on them)")
    p.add_argument("--half", choices=bfcl_ast.HALVES,
                   help="only this half's entries (bfcl_ast.half: tuning = even, held-out = odd), after --skip")
    p.add_argument("--categories", type=lambda s: s.split(","), default=list(CATEGORIES),
                   help=f"comma-separated, from {','.join(bfcl_ast.FILES)} (default {','.join(CATEGORIES)})")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="the BFCL folder (default ../shared/benchmarks/bfcl from the repository root)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--verbose", action="store_true", help="print every answer's verdict")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--minutes", type=float, default=15.0,
                   help="time budget: no new entry starts after it (default 15)")
    p.add_argument("--threads", type=int, default=2, help="llama-server threads (default 2)")
    p.add_argument("--constrain-modes", action="store_true",
                   help="columns: constrain off/repair/always, and off/repair with tool_choice required "
                        "(writes results/bfcl_constrain.md)")
    p.add_argument("--columns", type=lambda s: s.split(","),
                   help="comma-separated column names to run (the first is the baseline when direct native "
                        "is not among them)")
    p.add_argument("--model", type=Path,
                   help="a GGUF file for llama-server (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--raw", type=Path,
                   help="append every answer to this JSON Lines file (for bench/bfcl_official.py)")
    p.add_argument("--traces", type=Path,
                   help="keep the proxy's traces (SQLite) in this file rather than a scratch one deleted after")
    p.add_argument("--resume", action="store_true",
                   help="with --raw: skip entries the raw file already answers in every column (a run cut "
                        "into several shorter ones); the tables then cover only this run's entries")
    p.add_argument("--results", help="name of the results/NAME.md written (default bfcl or bfcl_constrain; "
                                     "'-' writes none)")
    args = p.parse_args(argv)
    args.limit = args.limit or (1 if args.quick else 10)
    args.template = None
    unknown = set(args.categories) - set(bfcl_ast.FILES)
    if unknown:
        p.error(f"unknown categories {sorted(unknown)}")
    return args


if __name__ == "__main__":
    sys.exit(main())
