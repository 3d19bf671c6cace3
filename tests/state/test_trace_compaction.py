"""A stored trace does not hold the request body twice: round 1's `sent` names the members it sent as the request
had them (state/traces.compacted), and the API returns the whole document (traces.expanded)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson

from sanctum_proxy.state.traces import compacted, expanded
from tests.fakes.trace_scenarios import bounced, repaired
from tests.state.test_traces import proxy_on, trace_of


def stored_doc(path: Path, trace_id: str) -> dict[str, Any]:
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT doc FROM traces WHERE id = ?", (trace_id,)).fetchone()
    return dict(orjson.loads(row[0]))


def test_the_first_rounds_sent_body_is_stored_once_and_served_whole(fake, tmp_path: Path):
    path = tmp_path / "traces.sqlite3"
    server = proxy_on(fake[1], traces_path=str(path))
    try:
        r = repaired(fake[0], server.url)
        trace = trace_of(server.url, r)  # the API: the whole document
        upstream_got = {k: v for k, v in fake[0].requests[-1].items() if k != "stream"}  # added on the wire
        sent = trace["rounds"][0]["sent"]
        assert sent == upstream_got and sent["messages"] == trace["request"]["messages"]
        assert "sent_keys" not in trace["rounds"][0]
        raw = stored_doc(path, r.headers["x-sanctum-trace-id"])
        first = raw["rounds"][0]
        assert "messages" not in first["sent"] and "tools" not in first["sent"]  # the request's own, by name
        assert first["sent_keys"] == list(sent)  # every key, in the order sent
        assert len(orjson.dumps(raw)) < len(orjson.dumps(trace))

        b = bounced(fake[0], server.url)  # a correction round sends more messages: written out whole
        got = {k: v for k, v in fake[0].requests[-1].items() if k != "stream"}
        assert trace_of(server.url, b)["rounds"][1]["sent"] == got  # (the API waits for the writer)
        second = stored_doc(path, b.headers["x-sanctum-trace-id"])["rounds"][1]
        assert len(second["sent"]["messages"]) >= 3
    finally:
        server.__exit__()


def test_compaction_keeps_equal_values_that_are_not_the_same_objects_and_round_trips():
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}
    sent = {"model": "m", "messages": list(request["messages"]), "tools": [{"type": "function"}], "stream": True}
    doc = {"request": request, "rounds": [{"number": 1, "sent": sent}, {"number": 2, "sent": None}]}
    small = compacted(doc)
    # "model": an equal str in the request (not compared deeply, but a str is the same object here or not:
    # either way the round trip holds); the messages list holds the same objects; the tools are new ones
    assert "messages" not in small["rounds"][0]["sent"] and small["rounds"][0]["sent"]["tools"] == sent["tools"]
    assert small["rounds"][0]["sent"]["stream"] is True and small["rounds"][1] == {"number": 2, "sent": None}
    assert doc["rounds"][0]["sent"] is sent  # the trace's own document is left as it was
    again = expanded(orjson.loads(orjson.dumps(small)))
    assert again == orjson.loads(orjson.dumps(doc))
    assert list(again["rounds"][0]["sent"]) == list(sent)
