"""Hostile input (issue 18): tool schemas that would fetch, read files or backtrack for minutes; pass-through
paths that would leave /v1; inputs that used to cost a 500, gigabytes or a blocked event loop; slow clients;
credentials that would leak. Each test fails without its fix."""

from __future__ import annotations

import http.client
import socket
import threading
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.core import decoded_json, json_fallback, lenient_json
from sanctum_proxy.repair import schemas
from tests.fakes.upstream import Step, completion, native_call
from tests.test_viewer_browser import page as page  # the headless Chromium fixture

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def tool(parameters: dict[str, Any], name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def assert_openai_error(r: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param, error
    return dict(error)


# --- 1. $ref: nothing is fetched or read ------------------------------------------------------------------

class Listener:
    """A TCP port that records whether anything connected (a $ref target the proxy must never reach)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.hits = 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/schema.json"

    def _run(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.mark.parametrize("where", ["http", "file", "relative", "dynamic"])
def test_schema_ref_outside_the_schema_is_400_naming_tools_and_nothing_is_fetched_or_read(make_proxy, fake,
                                                                                          tmp_path, where):
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string", "enum": ["TOP-SECRET-VALUE"]}')
    listener = Listener()
    ref = {"http": listener.url, "file": secret.as_uri(), "relative": "secret.json#/enum",
           "dynamic": listener.url}[where]
    keyword = "$dynamicRef" if where == "dynamic" else "$ref"
    proxy = make_proxy()
    body = {**ASK, "tools": [tool({"type": "object", "properties": {"city": {keyword: ref}}})]}
    fake[0].push(Step(body=completion(None, [native_call("get_weather", '{"city": "Paris"}')])))
    try:
        r = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=20)
    finally:
        listener.close()
    error = assert_openai_error(r, 400, "tools")
    assert "refers outside the schema" in error["message"] and "TOP-SECRET" not in r.text
    assert listener.hits == 0 and fake[0].requests == []


def test_schema_refs_inside_the_schema_still_work_and_a_dangling_one_is_400(make_proxy, fake):
    proxy = make_proxy()
    params = {"type": "object", "properties": {"city": {"$ref": "#/$defs/city"}}, "required": ["city"],
              "$defs": {"city": {"type": "string", "minLength": 2}}}
    fake[0].push(Step(body=completion(None, [native_call("get_weather", '{"city": "Paris"}')])))
    r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [tool(params)]}, timeout=20)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
    params["properties"]["city"]["$ref"] = "#/$defs/town"
    r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [tool(params)]}, timeout=20)
    assert "points at nothing" in assert_openai_error(r, 400, "tools")["message"]


def test_the_validator_itself_never_retrieves_a_reference():
    """Defence in depth: even a schema that slipped past the request check resolves nothing remote."""
    listener = Listener()
    try:
        validator = schemas.validator_for({"type": "object", "properties": {"a": {"$ref": listener.url}}})
        with pytest.raises(Exception, match="Unresolvable"):
            list(validator.iter_errors({"a": 1}))
    finally:
        listener.close()
    assert listener.hits == 0


# --- 2. patterns run on RE2 -------------------------------------------------------------------------------

EVIL = "^(a+)+$"


def test_catastrophic_pattern_is_checked_on_re2_and_the_call_is_corrected(make_proxy, fake):
    """Python's re needs minutes for this; RE2 answers at once, so the bad argument goes to tier 2."""
    proxy = make_proxy()
    params = {"type": "object", "properties": {"code": {"type": "string", "pattern": EVIL}},
              "patternProperties": {"^(x+)+$": {"type": "string"}}, "required": ["code"]}
    bad = orjson.dumps({"code": "a" * 26 + "!", "x" * 26 + "!": "y"}).decode()
    fake[0].push(Step(body=completion(None, [native_call("get_weather", bad)])),
                 Step(body=completion(None, [native_call("get_weather", '{"code": "aaa"}')])))
    with httpx.Client(base_url=proxy, timeout=60) as c:
        r = c.post("/v1/chat/completions", json={**ASK, "tools": [tool(params)]})
        assert c.get("/healthz").status_code == 200
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"code": "aaa"}'
    assert len(fake[0].requests) == 2  # the first answer was judged invalid (by RE2) and corrected
    assert schemas.compiled(EVIL).search("a" * 26 + "!") is None and len(schemas.compiled)


@pytest.mark.parametrize("params", [
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)a"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": r"(a)\1"}}},
    {"type": "object", "patternProperties": {"(?<!x)y": {"type": "string"}}},
])
def test_pattern_re2_cannot_run_is_400_naming_tools(make_proxy, fake, params):
    proxy = make_proxy()
    r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [tool(params)]}, timeout=20)
    assert "linear time" in assert_openai_error(r, 400, "tools")["message"]
    assert fake[0].requests == []


# --- 3. pass-through never leaves /v1 ---------------------------------------------------------------------

def raw_request(url: str, method: str, target: str, headers: dict[str, str] | None = None,
                body: bytes = b"") -> tuple[int, bytes]:
    """One request with the target sent byte for byte as written (no client normalises the dots away)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for name, value in {**(headers or {}), "content-length": str(len(body))}.items():
            conn.putheader(name, value)
        conn.endheaders(body or None)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


ESCAPES = [
    ("GET", "/v1/..%2f..%2fapi/tags"), ("GET", "/v1/%2e%2e/%2e%2e/api/tags"), ("GET", "/v1/../api/tags"),
    ("GET", "/v1/%252e%252e/%252e%252e/api/tags"), ("GET", "/v1/..%5c..%5capi/tags"), ("GET", "/v1/..\\..\\slots"),
    ("DELETE", "/v1/..%2f..%2fapi/delete"), ("POST", "/v1/./../api/pull"), ("GET", "/v1//api/tags"),
    ("GET", "/v1/models/%2E%2E%2F%2E%2E%2Fslots"), ("GET", "/v1/%25252e%25252e/x"),
]


@pytest.mark.parametrize(("method", "target"), ESCAPES)
def test_pass_through_paths_that_would_leave_v1_are_404_and_never_sent(make_proxy, fake, method, target):
    proxy = make_proxy(upstream_api_key="sk-upstream-secret")
    status, body = raw_request(proxy, method, target, body=b'{"model": "m"}' if method != "GET" else b"")
    assert status == 404, body
    error = orjson.loads(body)["error"]
    assert error["code"] == "not_found" and "Invalid URL" in error["message"]
    assert fake[0].stray == [] and fake[0].other_requests == []


def test_pass_through_under_v1_still_goes_through(make_proxy, fake):
    proxy = make_proxy()
    status, body = raw_request(proxy, "GET", "/v1/files/file-abc%20x?purpose=batch")
    assert status == 200 and orjson.loads(body)["path"] == "/v1/files/file-abc x"
    assert fake[0].other_requests[-1][:2] == ("GET", "/v1/files/file-abc x")


# --- 4. inputs that were a 500 --------------------------------------------------------------------------

def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("body", "param"), [
    ({**ASK, "metadata": {"deep": nested(300)}}, "metadata"),
    ({**ASK, "messages": [{"role": "user", "content": nested(600)}]}, "messages"),
    ({**ASK, "tool_choice": {"function": 5}}, "tool_choice"),
    ({**ASK, "tool_choice": {"type": "function", "function": {"name": 5}}}, "tool_choice"),
    ({**ASK, "tool_choice": 7}, "tool_choice"),
    ({**ASK, "stream": True, "stream_options": "x"}, "stream_options"),
    ({**ASK, "functions": [{"name": "f"}], "function_call": 3}, "function_call"),
])
def test_bodies_that_were_500s_are_400s_naming_the_field(make_proxy, fake, body, param):
    proxy = make_proxy()
    raw = orjson.dumps(body) if param not in ("metadata", "messages") else _dumps_deep(body)
    r = httpx.post(f"{proxy}/v1/chat/completions", content=raw, headers={"content-type": "application/json"},
                   timeout=20)
    assert_openai_error(r, 400, param)
    assert fake[0].requests == []


def _dumps_deep(value: Any) -> bytes:
    """orjson will not write what is too deep for it; the json module (without recursion trouble this
    shallow) will."""
    import json
    import sys
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        return json.dumps(value).encode()
    finally:
        sys.setrecursionlimit(old)


def test_unicode_digits_in_numeric_header_and_query_are_400s(make_proxy, fake):
    proxy = make_proxy()
    with httpx.Client(base_url=proxy, timeout=20) as c:
        r = c.post("/v1/chat/completions", json=ASK, headers={"x-sanctum-max-repair-rounds": b"\xb2"})  # ² as latin-1
        assert_openai_error(r, 400, "sanctum.max_repair_rounds")
        assert_openai_error(c.get("/sanctum/traces?limit=%C2%B2"), 400, "limit")
        assert_openai_error(c.get("/sanctum/traces?limit=%D9%A3"), 400, "limit")  # Arabic-Indic 3


# --- 7. credentials never shown ---------------------------------------------------------------------------

def test_credentials_in_the_upstream_url_are_never_shown(make_proxy, fake, capsys):
    port = fake[1].rsplit(":", 1)[1]
    proxy = make_proxy(upstream=f"http://alice:pa55w0rd@127.0.0.1:{port}/v1")
    with httpx.Client(base_url=proxy, timeout=20) as c:
        answers = [c.get("/readyz"), c.get("/sanctum/status"), c.post("/v1/chat/completions", json=ASK)]
        trace_id = answers[-1].headers["x-sanctum-trace-id"]
        answers += [c.get("/sanctum/traces"), c.get(f"/sanctum/traces/{trace_id}")]
    assert [a.status_code for a in answers] == [200] * 5
    for answer in answers:
        assert "pa55w0rd" not in answer.text and "alice" not in answer.text, answer.text
    assert answers[0].json()["upstream"] == f"http://***@127.0.0.1:{port}/v1"


UPSTREAM_KEY = "sk-upstream-5ecret-do-not-echo"


def test_upstream_key_echoed_in_a_2xx_answer_is_redacted_in_pass_through_and_chat(make_proxy, fake):
    proxy = make_proxy(upstream_api_key=UPSTREAM_KEY)
    fake[0].push(Step(body=completion(f"your key is {UPSTREAM_KEY}!")),
                 Step(chunks=[{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                               "choices": [{"index": 0, "delta": {"content": f"k={UPSTREAM_KEY}"},
                                            "finish_reason": "stop"}]}]))
    with httpx.Client(base_url=proxy, timeout=20) as c:
        # the fake's echo route sends the body back: a 201 with the key in it, and accept-encoding dropped
        passed = c.post("/v1/files", content=f"key {UPSTREAM_KEY} and {UPSTREAM_KEY}".encode(),
                        headers={"accept-encoding": "gzip"})
        plain = c.post("/v1/chat/completions", json=ASK)
        streamed = c.post("/v1/chat/completions", json={**ASK, "stream": True})
    assert (passed.status_code, plain.status_code, streamed.status_code) == (201, 200, 200)
    for answer in (passed, plain, streamed):
        assert UPSTREAM_KEY not in answer.text and "***" in answer.text, answer.text


@pytest.mark.parametrize("cut", [1, 5, 17, 29])
def test_a_key_split_between_relayed_chunks_is_still_redacted(cut):
    import asyncio

    from sanctum_proxy.upstreams.relay import redacted

    key = UPSTREAM_KEY.encode()
    text = b"a" * 7 + key + b"b" + key[:5] + b"xx" + key
    pieces = [text[i:i + cut] for i in range(0, len(text), cut)]

    async def chunks() -> Any:
        for piece in pieces:
            yield piece

    async def joined() -> bytes:
        return b"".join([piece async for piece in redacted(chunks(), key)])

    assert asyncio.run(joined()) == b"a" * 7 + b"***b" + key[:5] + b"xx***"


# --- 8. max_body_bytes on pass-through ------------------------------------------------------------------

def test_max_body_bytes_applies_to_pass_through_without_upstreams(make_proxy, fake):
    proxy = make_proxy(max_body_bytes=1000)
    with httpx.Client(base_url=proxy, timeout=20) as c:
        r = c.post("/v1/embeddings", content=b"x" * 5000)
        assert_openai_error(r, 413, None)

        def chunked() -> Any:
            yield b"y" * 600
            yield b"y" * 600

        assert_openai_error(c.post("/v1/embeddings", content=chunked()), 413, None)
        assert c.post("/v1/embeddings", content=b"z" * 900).status_code == 201
    assert [len(body) for _, _, body in fake[0].other_requests] == [900]


# --- 5. bounded work --------------------------------------------------------------------------------------

WRITE = tool({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}, "write")


def test_call_text_over_max_repair_bytes_goes_to_tier_2_not_to_local_repair(make_proxy, fake):
    broken = "{'text': '" + "lorem ipsum " * 400 + "'}"  # single quotes: mended locally when small enough
    for setting, rounds in ((None, 1), (2048, 2)):
        fake[0].requests.clear()
        fake[0].push(Step(body=completion(None, [native_call("write", broken)])),
                     Step(body=completion(None, [native_call("write", '{"text": "short"}')])))
        proxy = make_proxy(spell_calling="native", **({"max_repair_bytes": setting} if setting else {}))
        r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [WRITE]}, timeout=30)
        assert r.status_code == 200 and len(fake[0].requests) == rounds, (setting, r.text)
        fake[0].steps.clear()
    rejected = r.json()["sanctum"]["omens"][0]
    assert rejected["reason"] == "malformed_json" and "over the 2048" in rejected["details"][0]


def test_a_10_mb_broken_argument_costs_bounded_memory_and_is_reported():
    import tracemalloc

    from sanctum_proxy.repair.mend import assess
    from sanctum_proxy.repair.toolbox import Toolbox

    book = Toolbox.from_tools([WRITE])
    args = "{'text': '" + "ab, cd: [1] " * (10_000_000 // 12) + "'"
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c", "type": "function", "function": {"name": "write", "arguments": args}}]}
    tracemalloc.start()
    try:
        outcome = assess(message, book)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 * 1024 * 1024, peak  # it was 1.7 GB (a token list over the whole text)
    assert outcome.calls == () and "max_repair_bytes" in outcome.problems[0].details[0]


def test_json_repair_never_sees_more_than_its_cap():
    unrepairable_by_rules = "{'a': 1, 'b': undefined_thing, " + "'k': 'v', " * 3000 + "}"
    assert len(unrepairable_by_rules) > json_fallback.MAX_FALLBACK_CHARS
    assert isinstance(lenient_json.decode(unrepairable_by_rules), decoded_json.Undecodable)
    small = "{'a': 1, 'b': undefined_thing}"
    assert isinstance(lenient_json.decode(small), decoded_json.Decoded | decoded_json.Undecodable)  # json_repair runs


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_constrained_stream_reads_each_character_once(size):
    """The text branch of a constrained answer, chunked any way, gives visible_text's text; what it keeps
    between chunks is at most a cut escape (it used to re-read and re-decode the whole answer per chunk)."""
    from sanctum_proxy.repair import constrain
    from sanctum_proxy.repair.streaming import Assembler

    body = 'Hi \\"there\\" \\\\ a\\nb \\u00e9\\ud83d\\ude00 ' * 2000 + "end"
    raw = '{"content": "' + body + '"}'
    assembler = Assembler(text_branch=True)
    shown, held = [], 0
    for i in range(0, len(raw), size):
        shown.append(assembler.feed({"choices": [{"index": 0, "delta": {"content": raw[i:i + size]}}]}))
        held = max(held, len(assembler._branch._buffer), len(assembler._pending))
    assert "".join(shown) == constrain.visible_text(raw) == orjson.loads(raw)["content"]
    assert held <= 16


# --- 9. viewer headers, Connection-named headers, /metrics ---------------------------------------------

def test_viewer_and_its_files_send_a_content_security_policy(proxy):
    for path in ("/sanctum/", "/sanctum/static/viewer.js", "/sanctum/static/viewer.css"):
        r = httpx.get(proxy + path, timeout=10)
        assert r.status_code == 200
        policy = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and r.headers["x-content-type-options"] == "nosniff"


def test_viewer_runs_under_its_policy_and_no_stored_markup_runs(page, proxy, fake):  # noqa: F811
    from tests.fakes.trace_scenarios import repaired

    violations: list[str] = []
    page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.on("dialog", lambda dialog: violations.append("a dialog opened: " + dialog.message))
    fake[0].push(Step(body=completion('<img src=x onerror="alert(1)"><script>alert(2)</script>')))
    httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "messages": [
        {"role": "user", "content": '<svg onload="alert(3)">'}]}, timeout=20)
    repaired(fake[0], proxy)
    page.goto(proxy + "/sanctum/")
    rows = page.locator("#rows tr")
    rows.nth(1).wait_for()
    rows.nth(1).click()
    page.locator("#detail").get_by_text("alert(1)", exact=False).first.wait_for()
    rows.nth(0).click()
    page.locator("#detail .card.mended").wait_for()
    assert violations == []


def test_headers_named_in_connection_are_not_forwarded(make_proxy, fake):
    proxy = make_proxy()
    status, body = raw_request(proxy, "POST", "/v1/files", body=b"{}", headers={
        "connection": "keep-alive, x-secret-hop", "x-secret-hop": "do-not-forward", "x-kept": "yes"})
    assert status == 201
    seen = fake[0].other_requests[-1]
    assert seen[:2] == ("POST", "/v1/files")
    headers = fake[0].other_headers[-1]
    assert "x-secret-hop" not in headers and headers.get("x-kept") == "yes"


def test_metrics_takes_the_admin_key_and_is_open_only_where_no_key_is_set(make_proxy):
    guarded, closed, open_ = (make_proxy(admin_key="adm", api_keys=["cli"]), make_proxy(api_keys=["cli"]),
                              make_proxy())
    assert_openai_error(httpx.get(guarded + "/metrics", timeout=10), 401, None)
    assert httpx.get(guarded + "/metrics", headers={"authorization": "Bearer cli"}, timeout=10).status_code == 401
    assert httpx.get(guarded + "/metrics", headers={"authorization": "Bearer adm"}, timeout=10).status_code == 200
    assert httpx.get(closed + "/metrics", headers={"authorization": "Bearer cli"}, timeout=10).status_code == 401
    assert httpx.get(open_ + "/metrics", timeout=10).status_code == 200


# --- 6. slow clients --------------------------------------------------------------------------------------

def slow_body(url: str, declared: int, sent: bytes) -> socket.socket:
    """A client that announced `declared` bytes of body, sent `sent` and went quiet (1 byte/s, for a test)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(declared).encode() + b"\r\n\r\n" + sent)
    return sock


def read_answer(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
        if b"\r\n\r\n" in data and b'"error"' in data:
            break
    return data


def test_a_body_still_arriving_holds_no_concurrency_slot(make_proxy, fake):
    proxy = make_proxy(max_concurrent_requests=1)
    trickling = [slow_body(proxy, 1000, b'{"model": ') for _ in range(3)]
    try:
        r = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=20)
        assert r.status_code == 200, r.text  # it was a 429: the trickling bodies held the only slot
    finally:
        for sock in trickling:
            sock.close()


def test_a_body_that_does_not_arrive_within_body_read_timeout_is_408(make_proxy, fake):
    proxy = make_proxy(body_read_timeout=0.3)
    sock = slow_body(proxy, 1000, b'{"model": ')
    try:
        answer = read_answer(sock)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"x-should-retry" not in head.lower()  # a slow body may arrive next time: the SDK's own rule decides
    assert orjson.loads(body)["error"]["code"] == "request_timeout" and fake[0].requests == []


def test_a_request_head_that_does_not_arrive_within_header_read_timeout_is_closed(fake):
    from sanctum_proxy.app import create_app
    from sanctum_proxy.cli import http_protocol
    from sanctum_proxy.config import load_settings
    from tests.conftest import ServerThread

    settings = load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:", "header_read_timeout": 0.3})
    server = ServerThread(create_app(settings))
    server.server.config.http = http_protocol(settings)["http"]
    with server:
        assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200  # a brisk client is served
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        try:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: a")  # ...and never the rest
            assert slow.recv(1024) == b""  # closed by the proxy (it used to wait for ever)
            assert idle.recv(1024) == b""  # a connection that sends nothing at all, too
        finally:
            slow.close()
            idle.close()


def test_a_redirect_from_the_upstream_is_relayed_never_followed(make_proxy):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse, RedirectResponse
    from starlette.routing import Route

    from tests.conftest import ServerThread

    reached: list[str] = []

    async def away(request: Any) -> Any:
        return RedirectResponse("/api/delete", status_code=307)

    async def outside(request: Any) -> Any:
        reached.append(request.url.path)
        return PlainTextResponse("deleted")

    app = Starlette(routes=[Route("/v1/go", away, methods=["GET", "DELETE"]),
                            Route("/api/delete", outside, methods=["GET", "DELETE"])])
    with ServerThread(app) as upstream:
        proxy = make_proxy(upstream=upstream.url + "/v1", upstream_api_key="sk-up")
        r = httpx.request("DELETE", f"{proxy}/v1/go", timeout=10, follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/api/delete"
    assert reached == []
