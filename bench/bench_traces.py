"""What recording a trace costs the event loop: `Recorder.begin` at the start of a chat request and the end of
the trace (`_end`: latency, outcome, two gauge moves, one put_nowait), with the writer thread running and
storing into SQLite at the same time, as in the proxy.

    python bench/bench_traces.py [--n 20000] [--path :memory:|FILE] [--out bench/results/traces.md]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from starlette.requests import Request

from sanctum_proxy.app import retention
from sanctum_proxy.config import Settings
from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Repair
from sanctum_proxy.protocols.chat_request import ChatRequest, Controls
from sanctum_proxy.repair.loop_data import Final, Plan, RoundRecord
from sanctum_proxy.state.recorder import Recorder

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
BODY = {"model": "qwen2.5:0.5b", "tools": [WEATHER],
        "messages": [{"role": "system", "content": "You are helpful. " * 40},
                     {"role": "user", "content": "What is the weather in Paris? " * 10}]}


def one_request() -> tuple[Request, ChatRequest, Plan, RoundRecord, Final]:
    """A repaired request as the loop leaves it: one round, one SpellCallRepaired omen."""
    request = Request({"type": "http", "method": "POST", "path": "/v1/chat/completions",
                       "headers": [(b"x-request-id", b"bench")]})
    chat = ChatRequest(BODY, Controls("auto", 2))
    plan = Plan(body=BODY, book=None, mode="native", auto=True, max_rounds=2, upstream="http://127.0.0.1:1/v1")
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris",}'}}
    record = RoundRecord(1, "native", BODY, 12.5, {"role": "assistant", "tool_calls": [call]}, "tool_calls",
                         {"prompt_tokens": 300, "completion_tokens": 20}, None, "accepted")
    omen = om.repaired(1, Repair("get_weather", "call_1", ("trailing_comma",), str(call)))
    fixed = {**call, "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    final = Final({"role": "assistant", "content": None, "tool_calls": [fixed]}, "tool_calls",
                  {"total_tokens": 320}, "native", 1, [omen], {}, "repaired")
    return request, chat, plan, record, final


def measure(recorder: Recorder, n: int) -> tuple[list[float], list[float]]:
    begins, ends = [], []
    for i in range(n):
        request, chat, plan, record, final = one_request()
        t0 = time.perf_counter_ns()
        trace = recorder.begin(request, f"trace{i:08d}", chat, plan)
        t1 = time.perf_counter_ns()
        trace.record(record)  # as routes/rounds.py hands it over
        trace.final = final
        t2 = time.perf_counter_ns()
        recorder._end(trace)
        t3 = time.perf_counter_ns()
        begins.append((t1 - t0) / 1000)
        ends.append((t3 - t2) / 1000)
    return begins, ends


def summary(name: str, values: list[float]) -> str:
    values = sorted(values)
    p = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return (f"| {name} | {statistics.mean(values):.1f} | {p(0.5):.1f} | {p(0.99):.1f} | {p(0.999):.1f} "
            f"| {values[-1]:.1f} |")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--n", type=int, default=20000)
    args.add_argument("--path", default=None, help="SQLite path (default: a temporary file)")
    args.add_argument("--out", default=None)
    opts = args.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = opts.path or str(Path(tmp) / "traces.sqlite3")
        recorder = Recorder(retention(Settings.model_construct(**{**Settings().model_dump(), "traces_path": path})))
        recorder.start()
        measure(recorder, 500)  # warm up
        started = time.perf_counter()
        begins, ends = measure(recorder, opts.n)
        hot = time.perf_counter() - started
        assert recorder.flush(60), "the writer did not catch up"
        drained = time.perf_counter() - started
        stored = recorder.store.count() if recorder.store else 0
        recorder.close()
    store = opts.path or "a temporary file"
    lines = [f"# Trace recording on the hot path ({opts.n} repaired requests, store {store})",
             "", "| step (us) | mean | p50 | p99 | p99.9 | max |", "|---|---|---|---|---|---|",
             summary("begin (Trace, gauges)", begins), summary("end (outcome, gauges, enqueue)", ends),
             "", f"Loop of {opts.n} requests: {hot:.2f} s; writer caught up after {drained:.2f} s "
             f"({stored} traces kept, traces_max_count {Settings().traces_max_count})."]
    text = "\n".join(lines)
    print(text)
    if opts.out:
        Path(opts.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
