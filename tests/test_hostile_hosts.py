"""Hostile input, round 3: the proxy answers only requests meant for it. A page rebinding its name to 127.0.0.1
(DNS rebinding) sends its own name in `Host`; a cross-site page sends its `Origin` or `Sec-Fetch-Site`; a form
sends `text/plain`. Each test fails without its fix (web/host_check.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fakes.upstream import Step, completion

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES: dict[str, Any] = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
EVIL = "http://rebound.example:8100"


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["message"], error
    return dict(error)


@pytest.mark.parametrize("path", ["/sanctum/traces", "/sanctum/status", "/metrics", "/v1/models", "/readyz"])
def test_a_rebound_host_reads_nothing_from_a_proxy_on_loopback(proxy, fake, path):
    """A page on another origin, its name rebound to 127.0.0.1, read every trace of a keyless proxy."""
    r = httpx.get(proxy + path, headers={"host": "rebound.example:8100"}, timeout=10)
    assert openai_error(r, 421)["code"] == "misdirected_request"
    assert fake[0].other_requests == []


def test_a_rebound_host_is_refused_in_each_endpoints_shape(proxy, fake):
    chat = httpx.post(proxy + "/v1/chat/completions", json=ASK, headers={"host": "rebound.example"}, timeout=10)
    openai_error(chat, 421)
    messages = httpx.post(proxy + "/v1/messages", json=MESSAGES, headers={"host": "rebound.example"}, timeout=10)
    assert messages.status_code == 421 and messages.json()["type"] == "error", messages.text
    assert messages.json()["error"]["type"] == "invalid_request_error"
    assert fake[0].requests == []


@pytest.mark.parametrize("host", ["127.0.0.1:8100", "localhost:8100", "LOCALHOST", "[::1]:8100", "127.0.0.2",
                                  "app.localhost:3000"])
def test_loopback_hosts_are_served(proxy, host):
    r = httpx.get(proxy + "/sanctum/status", headers={"host": host}, timeout=10)
    assert r.status_code == 200, r.text


def test_a_name_in_allowed_hosts_is_served_and_healthz_always_is(make_proxy):
    proxy = make_proxy(allowed_hosts=["proxy.lan", "*.internal.example"])
    for host in ("proxy.lan", "proxy.lan:8100", "a.internal.example"):
        assert httpx.get(proxy + "/sanctum/status", headers={"host": host}, timeout=10).status_code == 200
    assert httpx.get(proxy + "/sanctum/status", headers={"host": "proxy.lan.evil"}, timeout=10).status_code == 421
    assert httpx.get(proxy + "/healthz", headers={"host": "rebound.example"}, timeout=10).status_code == 200


def test_a_proxy_listening_beyond_loopback_serves_any_host_unless_names_are_set(make_proxy):
    open_proxy = make_proxy(host="0.0.0.0")
    assert httpx.get(open_proxy + "/v1/models", headers={"host": "proxy.lan"}, timeout=10).status_code == 200
    named = make_proxy(host="0.0.0.0", allowed_hosts=["proxy.lan"])
    assert httpx.get(named + "/v1/models", headers={"host": "10.0.0.7:8100"}, timeout=10).status_code == 200
    assert httpx.get(named + "/v1/models", headers={"host": "rebound.example"}, timeout=10).status_code == 421


@pytest.mark.parametrize("headers", [{"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"},
                                     {"origin": "null"}, {"origin": "http://localhost:3000"}])
@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/chat/completions"), ("GET", "/sanctum/traces"),
                                              ("GET", "/v1/models"), ("POST", "/v1/embeddings")])
def test_a_cross_site_page_is_refused_on_reading_and_state_changing_routes(proxy, fake, headers, method, path):
    fake[0].push(Step(body=completion("hi")))
    r = httpx.request(method, proxy + path, json=ASK, headers=headers, timeout=10)
    assert openai_error(r, 403)["code"] == "cross_site_request"
    assert fake[0].requests == [] and fake[0].other_requests == []


def test_an_origin_listed_in_cors_origins_and_the_proxys_own_pages_are_served(make_proxy, fake):
    proxy = make_proxy(cors_origins=["https://app.example"])
    fake[0].push(Step(body=completion("one")), Step(body=completion("two")))
    listed = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=10,
                        headers={"origin": "https://app.example", "sec-fetch-site": "cross-site"})
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == "https://app.example"
    own = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=10,
                     headers={"origin": proxy, "sec-fetch-site": "same-origin"})
    assert own.status_code == 200, own.text
    navigation = httpx.get(proxy + "/sanctum/", timeout=10,
                           headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"})
    assert navigation.status_code == 200


@pytest.mark.parametrize("kind", ["text/plain", "text/plain;charset=UTF-8", "multipart/form-data; boundary=x"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"])
def test_a_form_body_is_not_read_as_json(proxy, fake, kind, path):
    """A page's "simple" POST (no preflight) with a JSON text as text/plain drove a keyless proxy."""
    import orjson

    fake[0].push(Step(body=completion("hi")))
    r = httpx.post(proxy + path, content=orjson.dumps(MESSAGES), headers={"content-type": kind}, timeout=10)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert fake[0].requests == [] and fake[0].other_requests == []


def test_a_urlencoded_body_is_refused_from_a_browser_only(proxy, fake):
    fake[0].push(Step(body=completion("hi")))
    form = {"content-type": "application/x-www-form-urlencoded"}
    r = httpx.post(proxy + "/v1/chat/completions", content=b'{"model": "m"}', timeout=10,
                   headers={**form, "sec-fetch-site": "same-origin"})
    assert r.status_code == 415, r.text
    curl = httpx.post(proxy + "/v1/chat/completions", content=b'{"model":"m","messages":[{"role":"user",'
                      b'"content":"hi"}]}', headers=form, timeout=10)
    assert curl.status_code == 200, curl.text  # curl -d without -H: not a page


@pytest.mark.parametrize("name", ["authorization", "x-api-key"])
def test_a_second_key_header_is_refused_so_one_key_cannot_take_another_keys_share(make_proxy, fake, name):
    """The key checked was the first header, the key whose share was counted the last: one key took every slot."""
    proxy = make_proxy(api_keys=["greedy", "polite"], max_concurrent_requests=2)
    value = (lambda k: f"Bearer {k}") if name == "authorization" else (lambda k: k)
    headers = [(name, value("greedy")), (name, value("other"))]
    for path, body in (("/v1/chat/completions", ASK), ("/v1/messages", MESSAGES)):
        r = httpx.post(proxy + path, json=body, headers=headers, timeout=10)
        assert r.status_code == 400 and "more than once" in r.text, r.text
    assert fake[0].requests == []
    fake[0].push(Step(body=completion("one")))
    single = httpx.post(proxy + "/v1/chat/completions", json=ASK, headers=[(name, value("greedy"))], timeout=10)
    assert single.status_code == 200, single.text


def test_the_embedded_llama_server_takes_only_the_proxys_key_and_answers_no_page():
    """It listened with no key and reflected any Origin: any local process or web page could use it directly."""
    from sanctum_proxy.upstreams.embedded import (
        EmbeddedUnavailable,
        LlamaServer,
        find_llama_server,
        find_model,
        proxy_key,
    )

    try:
        binary, model = find_llama_server(), find_model()
    except EmbeddedUnavailable as exc:
        pytest.skip(f"no embedded llama-server here: {exc}")
    key = proxy_key()
    assert len(key) >= 32 and key != proxy_key()
    with LlamaServer(binary=binary, model=model, api_key=key, ctx_size=512) as server:
        assert key not in " ".join(server.command())  # not on the command line other users see
        ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        url = server.base_url + "/chat/completions"
        assert httpx.post(url, json=ask, timeout=60).status_code == 401
        page = httpx.options(url, timeout=10, headers={"origin": "https://evil.example",
                                                       "access-control-request-method": "POST"})
        assert page.headers.get("access-control-allow-origin") in (None, "http://no-page.invalid"), page.headers
        assert httpx.post(url, json=ask, headers={"authorization": f"Bearer {key}"}, timeout=60).status_code == 200
