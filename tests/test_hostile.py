"""Hostile input (issue 18): tool schemas that would fetch, read files or backtrack for minutes; pass-through
paths that would leave /v1; inputs that used to cost a 500, gigabytes or a blocked event loop; slow clients;
credentials that would leak. Each test fails without its fix."""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.repair import schemas
from tests.fakes.upstream import Step, completion, native_call

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
    assert schemas.compiled(EVIL).search("a" * 26 + "!") is None and schemas.compiled.cache_info().currsize


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
