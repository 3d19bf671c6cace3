"""bench/bench_overhead.py reads the proxy's `x-sanctum-overhead-ms` from real answers and reports its p50."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from types import ModuleType

import pytest

from bench.loadgen import one_client, own_ms
from tests.fakes.upstream import Step, completion

BENCH = Path(__file__).parent.parent / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the bench's modules import each other as scripts do
    return importlib.import_module("bench_overhead")


def test_the_load_generator_reads_the_proxys_own_time_and_none_from_others(make_proxy, fake):
    fake[0].push(*[Step(body=completion("hi"))] * 6)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    through = asyncio.run(one_client(make_proxy(), "/v1/chat/completions", body, 3))
    direct = asyncio.run(one_client(fake[1], "/v1/chat/completions", body, 3))
    for reply in through:
        assert reply.own_ms is not None and 0 <= reply.own_ms < reply.total_ms
    assert [r.own_ms for r in direct] == [None] * 3


def test_own_ms_is_the_header_value_wherever_it_stands_in_the_head():
    head = b"http/1.1 200 ok\r\ncontent-length: 2\r\nx-sanctum-overhead-ms: 0.42\r\nx-sanctum-rounds: 1\r\n\r\n"
    assert own_ms(head) == 0.42
    assert own_ms(head.replace(b"x-sanctum-overhead-ms", b"x-other")) is None


def test_the_report_puts_the_header_p50_beside_the_added_latency(bench):
    samples = {name: bench.Samples() for name in ("direct", "relay", "sanctum")}
    for name, ms in (("direct", 1.0), ("relay", 1.5), ("sanctum", 2.0)):
        samples[name].call_ms, samples[name].ttft_ms, samples[name].stream_ms = [[ms] * 5], [[ms] * 5], [[ms] * 5]
    samples["sanctum"].own_call_ms = [0.2, 0.3, 0.4]
    samples["sanctum"].own_stream_ms = [0.1]
    text = bench.report(samples, {}, bench.parse(["--quick"]))
    call_table = text.split("## One client: streaming")[0]
    assert "own p50 ms (header) |" in call_table
    assert "| sanctum | 2.00 | 2.00 | +1.00 [+1.00..+1.00] | +1.00 | 0.30 |" in call_table
    assert "| relay | 1.50 | 1.50 | +0.50 [+0.50..+0.50] | +0.50 | — |" in call_table
    assert "| +1.00 | 0.10 |" in text.split("## One client: streaming")[1]


def test_the_parsing_relay_reencodes_whole_events_and_passes_a_cut_one(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))
    relay = importlib.import_module("relay")
    piece = b'data: {"a": 1,  "b": [1, 2]}\n\ndata: [DONE]\n\ndata: {"cut'
    assert relay.reencoded_events(piece) == b'data: {"a":1,"b":[1,2]}\n\ndata: [DONE]\n\ndata: {"cut'
    assert relay.reencoded(b'{"x": "y" }') == b'{"x":"y"}'
