"""GET /metrics through the real proxy: what a repaired, a bounced, a surrendered and a fallen-back request
add to the counters and histograms, the in-flight gauges during a stream, and one registry per app."""

from __future__ import annotations

import threading

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.trace_scenarios import ASK, ask, bounced, repaired, surrendered
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, completion, content_chunks
from tests.polling import wait_until


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    """The sum of `name`'s samples that carry `labels` (and any others)."""
    wanted = set(labels.items())
    return sum(v for (n, given), v in found.items() if n == name and wanted <= set(given))


def counted(proxy: str, requests: int) -> dict:
    """The samples once `requests` requests are counted (the trace writer counts them)."""
    def check() -> dict | None:
        found = samples(proxy)
        return found if value(found, "sanctum_requests_total") == requests else None
    return wait_until(check, 5, f"{requests} requests counted")


def test_repaired_bounced_and_surrendered_requests_are_counted_apart(proxy, fake):
    repaired(fake[0], proxy)
    bounced(fake[0], proxy)
    surrendered(fake[0], proxy)
    m = samples(proxy)
    assert value(m, "sanctum_requests_total", mode="native", outcome="repaired") == 1
    assert value(m, "sanctum_requests_total", mode="native", outcome="rejected") == 1
    assert value(m, "sanctum_requests_total", mode="native", outcome="surrendered") == 1
    assert value(m, "sanctum_repairs_total", kind="trailing_comma") == 1
    assert value(m, "sanctum_rejections_total", reason="unknown_spell") == 3  # 1 bounce, 2 before surrender
    assert value(m, "sanctum_surrenders_total") == 1
    assert value(m, "sanctum_rounds_per_request_count") == 3
    assert value(m, "sanctum_rounds_per_request_sum") == 6
    assert value(m, "sanctum_rounds_per_request_bucket", le="1.0") == 1
    assert value(m, "sanctum_rounds_per_request_bucket", le="2.0") == 2
    assert value(m, "sanctum_upstream_latency_seconds_count", mode="native") == 6
    assert value(m, "sanctum_request_latency_seconds_count") == 3
    assert value(m, "sanctum_requests_in_flight") == 0 and value(m, "sanctum_streams_in_flight") == 0


def test_fallback_is_counted_with_its_reason_and_the_mode_it_ended_in(proxy, fake):
    fake[0].push(Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1]), Step(body=completion("Sunny.")))
    assert ask(proxy, {}, ASK).status_code == 200
    m = samples(proxy)
    assert value(m, "sanctum_fallbacks_total", reason="tools_rejected") == 1
    assert value(m, "sanctum_requests_total", mode="prompted", outcome="fallback") == 1
    assert value(m, "sanctum_upstream_latency_seconds_count", mode="native") == 1
    assert value(m, "sanctum_upstream_latency_seconds_count", mode="prompted") == 1


def test_in_flight_gauges_count_a_stream_while_it_runs(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("slowly, word by word", size=3), chunk_delay=0.15))
    done = threading.Event()
    streamed = {**ASK, "stream": True}
    threading.Thread(target=lambda: (ask(proxy, {}, streamed), done.set()), daemon=True).start()
    wait_until(lambda: value(samples(proxy), "sanctum_streams_in_flight") >= 1, 5, "the stream in flight")
    m = samples(proxy)
    assert value(m, "sanctum_streams_in_flight") == 1 and value(m, "sanctum_requests_in_flight") == 1
    assert done.wait(10)
    m = samples(proxy)
    assert value(m, "sanctum_streams_in_flight") == 0 and value(m, "sanctum_requests_in_flight") == 0
    assert value(m, "sanctum_requests_total", mode="native", outcome="clean") == 1


def test_each_proxy_counts_only_its_own_requests(make_proxy, fake):
    first, second = make_proxy(), make_proxy()
    repaired(fake[0], first)
    assert value(samples(first), "sanctum_requests_total", mode="native", outcome="repaired") == 1
    assert value(samples(second), "sanctum_requests_total", mode="native", outcome="repaired") == 0


def test_metrics_name_the_configured_model_and_upstream_and_every_other_name_is_other(make_proxy, fake):
    proxy = make_proxy(upstreams=[{"name": "local", "url": fake[1] + "/v1", "models": ["qwen3"],
                                   "aliases": {"gpt-4o": "qwen3"}}, {"name": "rest", "url": fake[1] + "/v1"}])
    usage = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37,
             "prompt_tokens_details": {"cached_tokens": 24}, "completion_tokens_details": {"reasoning_tokens": 3}}
    for model in ("gpt-4o", "made-up-1", "made-up-2"):
        fake[0].push(Step(body={**completion("hi"), "usage": usage}))
        r = httpx.post(proxy + "/v1/chat/completions", json={"model": model, "messages": ASK["messages"]})
        assert r.status_code == 200 and float(r.headers["x-sanctum-overhead-ms"]) >= 0
    fake[0].push(Step(chunks=content_chunks("streamed words")))
    assert httpx.post(proxy + "/v1/chat/completions", json={"model": "qwen3", "stream": True,
                                                            "messages": ASK["messages"]}).status_code == 200
    m = counted(proxy, 4)
    assert value(m, "sanctum_requests_total", model="qwen3", upstream="local") == 2  # the alias is its target
    assert value(m, "sanctum_requests_total", model="other", upstream="rest") == 2
    assert {dict(k[1]).get("model") for k in m if k[0] == "sanctum_requests_total"} == {"qwen3", "other"}
    assert value(m, "sanctum_tokens_total", type="input", model="other") == 60
    assert value(m, "sanctum_tokens_total", type="cached_input", model="qwen3") == 24
    assert value(m, "sanctum_tokens_total", type="reasoning", upstream="local") == 3
    assert value(m, "sanctum_time_to_first_chunk_seconds_count", model="qwen3", upstream="local") == 1
    assert value(m, "sanctum_request_latency_seconds_count", upstream="rest") == 2


def test_repairs_are_counted_by_call_format_and_kind(proxy, fake):
    repaired(fake[0], proxy)
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    fake[0].push(Step(body=completion(call)))
    assert ask(proxy, {}).status_code == 200
    m = counted(proxy, 2)
    assert value(m, "sanctum_repairs_total", format="tool_calls", kind="trailing_comma") == 1
    assert value(m, "sanctum_repairs_total", format="hermes", kind="hermes_in_content") == 1
