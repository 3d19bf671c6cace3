"""Traces through the real proxy and the scripted upstream: what GET /sanctum/traces[/{id}] tells about each
request, the filters and paging, privacy, retention, restarts, the access log line and X-Request-Id."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from sanctum_proxy.state.trace_store import Query, TraceStore
from sanctum_proxy.state.traces import clipped
from tests.conftest import ServerThread
from tests.fakes.trace_scenarios import ASK, TRAILING_COMMA, ask, bounced, calls, repaired, surrendered
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, completion, content_chunks, llama_tool_chunks
from tests.polling import wait_until

SMALL_DOC: dict[str, Any] = {
    "object": "sanctum.trace", "id": "t", "request_id": None, "created": 1.0, "time": "", "model": "m",
    "upstream": "u", "mode": "native", "requested_mode": "auto", "stream": False, "outcome": "clean",
    "status": 200, "latency_ms": 1.0, "usage": None, "request": {"model": "m", "messages": []}, "rounds": [],
    "omens": [], "answer": None, "error": None, "bodies": True,
}


def trace_of(url: str, response: httpx.Response, **headers: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/sanctum/traces/{response.headers['x-sanctum-trace-id']}", headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


def listed(url: str, **params: Any) -> dict[str, Any]:
    r = httpx.get(url + "/sanctum/traces", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_repaired_call_is_traced_with_the_raw_arguments_and_the_mended_ones(proxy, fake):
    r = repaired(fake[0], proxy)
    trace = trace_of(proxy, r)
    assert trace["outcome"] == "repaired" and trace["status"] == 200 and trace["mode"] == "native"
    assert trace["model"] == "m" and trace["upstream"].endswith("/v1") and trace["stream"] is False
    [round_] = trace["rounds"]
    assert round_["outcome"] == "accepted" and round_["status"] == 200 and round_["latency_ms"] > 0
    assert round_["sent"]["messages"] == ASK["messages"] and round_["usage"]["total_tokens"] == 15
    assert round_["answer"]["tool_calls"][0]["function"]["arguments"] == TRAILING_COMMA
    [omen] = trace["omens"]
    assert omen["type"] == "SpellCallRepaired" and "trailing_comma" in omen["repairs"]
    assert '\\"days\\": 3,}' in omen["raw"]  # the native call as the model sent it
    cast = trace["answer"]["message"]["tool_calls"][0]
    assert orjson.loads(cast["function"]["arguments"]) == {"city": "Paris", "days": 3}
    assert trace["error"] is None and trace["latency_ms"] >= round_["latency_ms"]


def test_bounced_call_is_traced_with_the_correction_and_the_next_answer(proxy, fake):
    trace = trace_of(proxy, bounced(fake[0], proxy))
    assert trace["outcome"] == "rejected" and trace["status"] == 200
    first, second = trace["rounds"]
    assert (first["outcome"], second["outcome"]) == ("rejected", "accepted")
    [omen] = trace["omens"]
    assert omen["type"] == "SpellCallRejected" and omen["reason"] == "unknown_spell"
    assert second["sent"]["messages"][-1] == {"role": "user", "content": omen["correction"]}
    assert "lookup_weather" in second["sent"]["messages"][-2]["content"]
    assert second["answer"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert trace["usage"]["total_tokens"] == 30


def test_surrender_is_traced_with_every_rejected_answer_and_the_422(proxy, fake):
    r = surrendered(fake[0], proxy)
    assert r.status_code == 422
    trace = trace_of(proxy, r) if "x-sanctum-trace-id" in r.headers else only_trace(proxy)
    assert trace["outcome"] == "surrendered" and trace["status"] == 422 and trace["answer"] is None
    assert [x["outcome"] for x in trace["rounds"]] == ["rejected"] * 3
    assert trace["error"]["type"] == "spell_call_parse_error" and len(trace["error"]["rejected"]) == 3
    assert [o["reason"] for o in trace["omens"]] == ["unknown_spell", "unknown_spell"]
    assert trace["usage"]["total_tokens"] == 45


def only_trace(url: str) -> dict[str, Any]:
    [summary] = listed(url)["data"]
    return dict(httpx.get(f"{url}/sanctum/traces/{summary['id']}").json())


def test_list_filters_by_outcome_model_and_since_and_pages_newest_first(proxy, fake):
    repaired(fake[0], proxy)
    bounced(fake[0], proxy)
    surrendered(fake[0], proxy)
    fake[0].push(Step(body=completion("Hello.")))
    ask(proxy, {}, {"model": "other", "messages": [{"role": "user", "content": "hi"}]})
    every = listed(proxy)["data"]
    assert [t["outcome"] for t in every] == ["clean", "surrendered", "rejected", "repaired"]
    assert every[3]["omens"] == {"SpellCallRepaired": 1} and every[3]["cast"] == ["get_weather"]
    assert every[1]["error"] == "spell_call_parse_error" and every[1]["rounds"] == 3
    assert [t["outcome"] for t in listed(proxy, outcome="rejected")["data"]] == ["rejected"]
    assert [t["model"] for t in listed(proxy, model="other")["data"]] == ["other"]
    assert listed(proxy, since=time.time() + 60)["data"] == []
    assert len(listed(proxy, since="2020-01-01T00:00:00Z")["data"]) == 4
    page = listed(proxy, limit=3)
    assert page["has_more"] and page["last_id"] == every[2]["id"]
    rest = listed(proxy, limit=3, after=page["last_id"])
    assert [t["id"] for t in rest["data"]] == [every[3]["id"]] and rest["has_more"] is False


@pytest.mark.parametrize("params, param", [({"outcome": "great"}, "outcome"), ({"limit": "0"}, "limit"),
                                           ({"since": "yesterday"}, "since"), ({"after": "nope"}, "after")])
def test_bad_list_parameters_are_400_naming_the_parameter(proxy, params, param):
    r = httpx.get(proxy + "/sanctum/traces", params=params)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_unknown_trace_id_is_an_openai_shaped_404(proxy):
    r = httpx.get(proxy + "/sanctum/traces/0123456789abcdef")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["code"] == "not_found"


def test_streamed_request_is_traced_when_the_stream_ends(proxy, fake):
    fake[0].push(Step(chunks=llama_tool_chunks("get_weather", TRAILING_COMMA)))
    r = ask(proxy, {}, {**ASK, "stream": True})
    assert r.text.rstrip().endswith("data: [DONE]")
    trace = trace_of(proxy, r)
    assert trace["stream"] is True and trace["outcome"] == "repaired" and trace["status"] == 200
    assert trace["rounds"][0]["answer"]["tool_calls"][0]["function"]["arguments"] == TRAILING_COMMA


def test_surrender_inside_a_stream_is_traced_as_surrendered_with_status_200(make_proxy, fake):
    url = make_proxy(max_repair_rounds=1)
    fake[0].push(Step(chunks=content_chunks("Let me think.")),
                 Step(chunks=llama_tool_chunks("nope", '{"city": "A"}')),
                 Step(chunks=llama_tool_chunks("nope", '{"city": "B"}')))
    r = ask(url, {}, {**ASK, "stream": True, "tool_choice": "required"})
    assert '"spell_call_parse_error"' in r.text
    trace = trace_of(url, r)
    assert trace["outcome"] == "surrendered" and trace["status"] == 200 and len(trace["rounds"]) == 2


def test_client_leaving_a_stream_is_traced_as_an_error(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("a long answer that trickles in", size=2), chunk_delay=0.2))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}) as r:
        trace_id = r.headers["x-sanctum-trace-id"]
        next(r.iter_raw())
    def written() -> httpx.Response | None:
        got = httpx.get(f"{proxy}/sanctum/traces/{trace_id}")
        return None if got.status_code == 404 else got

    got = wait_until(written, 5, "the trace to be written")
    trace = got.json()
    assert trace["outcome"] == "error" and trace["status"] == 499
    assert trace["error"]["type"] == "client_disconnected"


def test_client_leaving_before_a_plain_answer_is_traced_as_an_error(proxy, fake):
    fake[0].push(Step(body=completion("late"), delay=1.5))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=0.3)
    found = wait_until(lambda: listed(proxy)["data"], 5, "the trace to be written")
    assert [(t["outcome"], t["status"], t["error"]) for t in found] == [("error", 499, "client_disconnected")]


def test_upstream_error_before_the_answer_is_traced_as_an_error(proxy, fake):
    fake[0].push(Step(status=500, body={"error": {"message": "server overloaded"}}))
    r = ask(proxy, {}, ASK)
    assert r.status_code == 500
    [summary] = listed(proxy)["data"]
    trace = httpx.get(f"{proxy}/sanctum/traces/{summary['id']}").json()
    assert trace["outcome"] == "error" and trace["status"] == 500
    assert trace["error"]["message"] == "server overloaded" and trace["rounds"][0]["status"] == 500


def test_fallback_to_prompted_is_traced_with_both_rounds(proxy, fake):
    fake[0].push(Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1]),
                 Step(body=completion('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
                                      '</tool_call>')))
    trace = trace_of(proxy, ask(proxy, {}, ASK))
    assert trace["outcome"] == "fallback" and trace["mode"] == "prompted"
    assert trace["requested_mode"] == "auto"
    assert [(x["mode"], x["outcome"], x["status"]) for x in trace["rounds"]] == [
        ("native", "fallback", 500), ("prompted", "accepted", 200)]
    assert "tools" not in trace["rounds"][1]["sent"]


def test_request_id_is_echoed_and_stored(proxy, fake):
    r = repaired(fake[0], proxy, **{"X-Request-Id": "req-42"})
    assert r.headers["x-request-id"] == "req-42"
    assert trace_of(proxy, r)["request_id"] == "req-42"
    assert listed(proxy)["data"][0]["request_id"] == "req-42"
    assert "x-request-id" not in httpx.get(proxy + "/healthz").headers


def test_metadata_only_traces_keep_no_message_text(make_proxy, fake):
    url = make_proxy(traces_bodies=False)
    trace = trace_of(url, bounced(fake[0], url))
    stored = json.dumps(trace)
    assert "Paris" not in stored and "Weather" not in stored and "correction" not in stored
    assert trace["bodies"] is False and trace["outcome"] == "rejected"
    assert trace["request"] == {"model": "m", "stream": False, "message_count": 1, "tools": ["get_weather"]}
    assert trace["rounds"][1]["sent"]["message_count"] >= 3
    assert trace["omens"][0]["reason"] == "unknown_spell"
    assert trace["answer"]["message"]["tool_calls"][0]["function"] == {"name": "get_weather"}


def proxy_on(upstream_url: str, **flags: Any) -> ServerThread:
    return ServerThread(create_app(load_settings({"upstream": upstream_url + "/v1", **flags}))).__enter__()


def test_traces_survive_a_restart(fake, tmp_path: Path):
    path = str(tmp_path / "traces.sqlite3")
    first = proxy_on(fake[1], traces_path=path)
    r = repaired(fake[0], first.url)
    first.__exit__()
    second = proxy_on(fake[1], traces_path=path)
    try:
        assert trace_of(second.url, r)["outcome"] == "repaired"
    finally:
        second.__exit__()


def test_retention_keeps_the_newest_and_drops_the_old(fake, tmp_path: Path):
    path = str(tmp_path / "traces.sqlite3")
    first = proxy_on(fake[1], traces_path=path, traces_max_count=2)
    try:
        ids = [repaired(fake[0], first.url).headers["x-sanctum-trace-id"] for _ in range(3)]
        assert [t["id"] for t in listed(first.url)["data"]] == ids[:0:-1]
    finally:
        first.__exit__()
    time.sleep(0.05)
    second = proxy_on(fake[1], traces_path=path, traces_max_age_hours=0.01 / 3600)  # 10 ms
    try:
        assert listed(second.url)["data"] == []
    finally:
        second.__exit__()


def test_a_huge_answer_is_stored_clipped_and_says_so(fake, tmp_path: Path):
    path = str(tmp_path / "traces.sqlite3")
    proxy = proxy_on(fake[1], traces_path=path, traces_max_doc_bytes=65_536)
    try:
        fake[0].push(Step(body=completion("x" * 500_000)))
        r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": ASK["messages"]})
        assert r.json()["choices"][0]["message"]["content"] == "x" * 500_000  # the client gets it whole
        doc = trace_of(proxy.url, r)
        assert len(orjson.dumps(doc)) <= 65_536 and "bytes whole" in doc["clipped"]
        content = doc["answer"]["message"]["content"]
        assert content.startswith("xxx") and content.endswith("more characters not stored]")
        assert doc["outcome"] == "clean" and doc["rounds"][0]["status"] == 200  # the metadata is all there
    finally:
        proxy.__exit__()


def test_stored_bytes_stay_under_the_budget_newest_kept(tmp_path: Path):
    store = TraceStore(str(tmp_path / "traces.sqlite3"))
    docs = [{**SMALL_DOC, "id": f"t{i}", "request": {"messages": [{"content": "y" * 40_000}]}} for i in range(10)]
    store.add(docs)
    gone = store.prune(1000, 0.0, max_bytes=100_000)
    kept = [t["id"] for t in store.list(Query(limit=50))[0]]
    assert gone == 8 and kept == ["t9", "t8"]
    store.close()


def test_the_budget_holds_across_prunes_replaced_ids_and_a_reopened_store(tmp_path: Path):
    # The store keeps a running bound on its bytes and runs the budget's query only past it: the bound must
    # follow what the count and age steps removed, a replaced id, and what a reopened file already holds.
    path = str(tmp_path / "traces.sqlite3")
    big = {"messages": [{"content": "y" * 40_000}]}
    store = TraceStore(path)
    store.add([{**SMALL_DOC, "id": f"t{i}", "request": big} for i in range(3)])
    assert store.prune(2, 0.0, max_bytes=100_000) == 1  # the count step: t0 goes, ~80 kB stay
    store.add([{**SMALL_DOC, "id": "t2", "request": {}}])  # t2 replaced by a small document
    assert store.prune(1000, 0.0, max_bytes=100_000) == 0
    store.add([{**SMALL_DOC, "id": "t3", "request": big}])  # t1 + t3 + small t2: ~80 kB, under the budget
    assert store.prune(1000, 0.0, max_bytes=100_000) == 0
    store.add([{**SMALL_DOC, "id": "t4", "request": big}])
    assert store.prune(1000, 0.0, max_bytes=100_000) == 1
    assert [t["id"] for t in store.list(Query(limit=50))[0]] == ["t4", "t3", "t2"]
    store.close()
    reopened = TraceStore(path)
    reopened.add([{**SMALL_DOC, "id": "t5", "request": big}])
    assert reopened.prune(1000, 0.0, max_bytes=100_000) == 2
    assert [t["id"] for t in reopened.list(Query(limit=50))[0]] == ["t5", "t4"]
    reopened.close()


def test_pruning_a_big_trace_writes_a_few_pages_not_the_whole_trace_again(tmp_path: Path):
    # Debian's SQLite (python:3.11-slim's too) zeroes every page a delete frees: a full store pruning each new
    # trace would write every old one a second time.
    path = str(tmp_path / "traces.sqlite3")
    store = TraceStore(path)
    big = {"messages": [{"content": f"{i:06d}" * 20_000} for i in range(8)]}  # ~1 MB: 15+ pages of 64 KB
    store.add([{**SMALL_DOC, "id": "big", "request": big}, {**SMALL_DOC, "id": "small"}])
    log = sqlite3.connect(path)
    log.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert store.prune(1, 0.0) == 1
    _, frames, _ = log.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert [t["id"] for t in store.list(Query(limit=50))[0]] == ["small"]
    assert 0 < frames < 10  # the table's and its indexes' pages and the free list (5), not the trace's (18)
    log.close()
    store.close()


def test_the_budget_counts_what_another_worker_stored_in_the_same_file(tmp_path: Path):
    path = str(tmp_path / "traces.sqlite3")
    big = {"messages": [{"content": "y" * 40_000}]}
    mine, other = TraceStore(path), TraceStore(path)  # two workers' connections
    mine.add([{**SMALL_DOC, "id": "t0", "request": big}])
    assert mine.prune(1000, 0.0, max_bytes=100_000) == 0
    other.add([{**SMALL_DOC, "id": f"t{i}", "request": big} for i in (1, 2)])  # ~120 kB in all now
    assert mine.prune(1000, 0.0, max_bytes=100_000) == 1
    assert [t["id"] for t in mine.list(Query(limit=50))[0]] == ["t2", "t1"]
    mine.close()
    other.close()


def test_a_document_of_many_short_strings_falls_back_to_metadata_only():
    doc = {**SMALL_DOC, "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 5000}}
    out = clipped(doc, 8192, len(orjson.dumps(doc)))
    assert out["clipped"].startswith("metadata only") and out["request"]["message_count"] == 5000
    assert len(orjson.dumps(out)) <= 8192


def test_traces_need_the_admin_key_where_keys_are_set_and_the_page_does_not(make_proxy, fake):
    url = make_proxy(api_keys=["sk-good"], admin_key="sk-admin")
    r = repaired(fake[0], url, authorization="Bearer sk-good")
    assert httpx.get(url + "/sanctum/traces").status_code == 401
    assert httpx.get(f"{url}/sanctum/traces/{r.headers['x-sanctum-trace-id']}").status_code == 401
    assert httpx.get(url + "/sanctum/traces", headers=KEY).status_code == 401  # a client key reads none
    assert trace_of(url, r, authorization="Bearer sk-admin")["outcome"] == "repaired"
    page = httpx.get(url + "/sanctum/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_one_json_access_log_line_per_request(proxy, fake, caplog):
    caplog.set_level(logging.INFO, logger="sanctum_proxy.access")
    r = repaired(fake[0], proxy, **{"X-Request-Id": "req-7"})
    surrendered(fake[0], proxy)
    listed(proxy)  # waits for the writer
    lines = access_lines(caplog)
    assert [(x["outcome"], x["status"], x["rounds"]) for x in lines] == [("repaired", 200, 1),
                                                                          ("surrendered", 422, 3)]
    assert lines[0]["trace_id"] == r.headers["x-sanctum-trace-id"] and lines[0]["request_id"] == "req-7"
    assert lines[0]["model"] == "m" and lines[0]["mode"] == "native" and lines[0]["latency_ms"] > 0


def test_refused_request_gets_a_log_line_and_a_count_but_no_trace(make_proxy, fake, caplog):
    caplog.set_level(logging.INFO, logger="sanctum_proxy.access")
    url = make_proxy(api_keys=["sk-good"], admin_key="sk-admin")
    chat = url + "/v1/chat/completions"
    assert httpx.post(chat, json=ASK, headers={"X-Request-Id": "bad-1"}).status_code == 401
    assert httpx.post(chat, content=b"{", headers=KEY).status_code == 400
    first, second = access_lines(caplog)
    assert (first["status"], first["request_id"], first["outcome"]) == (401, "bad-1", "error")
    assert second["status"] == 400 and second["trace_id"] is None
    assert httpx.get(url + "/sanctum/traces", headers=ADMIN).json()["data"] == []
    counted = 'sanctum_requests_total{mode="none",model="none",outcome="error",upstream="none"} 2.0'
    assert counted in httpx.get(url + "/metrics", headers=ADMIN).text


KEY = {"authorization": "Bearer sk-good"}
ADMIN = {"authorization": "Bearer sk-admin"}


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The chat requests' lines (every other request has an `http_request` line: tests/state/test_access_log.py)."""
    lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "sanctum_proxy.access"]
    return [line for line in lines if line["event"] == "chat_request"]


def test_bodies_of_a_bounced_request_keep_both_answers(proxy, fake):
    fake[0].push(calls("get_weather", '{"town": "Paris"}'), calls("get_weather", '{"city": "Paris"}'))
    trace = trace_of(proxy, ask(proxy, {}, ASK))
    assert trace["omens"][0]["reason"] in ("missing_arguments", "unexpected_arguments")
    assert "town" in trace["rounds"][0]["answer"]["tool_calls"][0]["function"]["arguments"]


def test_trace_ids_are_uuid7_growing_with_time() -> None:
    import time
    import uuid

    from sanctum_proxy.state.trace_store import new_id

    first = new_id()
    time.sleep(0.002)
    ids = [new_id() for _ in range(50)]
    assert all(len(i) == 32 and uuid.UUID(i).version == 7 for i in ids)
    assert all(first < i for i in ids)  # a later millisecond sorts after: appended to the store's id index
    assert len(set(ids)) == 50
    now_ms = int(time.time() * 1000)
    assert abs(int(ids[0][:12], 16) - now_ms) < 5000
