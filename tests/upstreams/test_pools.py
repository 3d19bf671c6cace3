"""Several upstreams: model-name routing, aliases, /v1/models, and a pool of backends that fails over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from sanctum_proxy.config import UpstreamConfig, load_settings
from sanctum_proxy.upstreams.pools import choose, listed_models
from tests.conftest import ServerThread
from tests.fakes.upstream import LLAMA_NO_JINJA, FakeUpstream, Step, completion, content_chunks, native_call
from tests.polling import wait_until

ASK = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def entry(name: str, *models: str, **more: Any) -> UpstreamConfig:
    return UpstreamConfig(name=name, urls=["http://127.0.0.1:1/v1"], models=list(models), **more)


def test_exact_names_and_aliases_win_over_globs_and_catch_all():
    entries = [entry("globs", "qwen*"), entry("exact", "qwen2.5:7b", aliases={"gpt-4o": "qwen2.5:7b"}),
               entry("rest", "*")]
    assert choose(entries, "qwen2.5:7b") == (1, "qwen2.5:7b")
    assert choose(entries, "gpt-4o") == (1, "qwen2.5:7b")
    assert choose(entries, "qwen3:4b") == (0, "qwen3:4b")
    assert choose(entries, "llama3.2") == (2, "llama3.2")
    assert choose(entries[:2], "llama3.2") is None
    assert listed_models(entries) == [("qwen2.5:7b", "exact"), ("gpt-4o", "exact")]


class Fakes:
    """Fake upstreams on their own ports; `stop(i)` kills one mid-test."""

    def __init__(self, count: int) -> None:
        self.fakes = [FakeUpstream() for _ in range(count)]
        self.servers = [ServerThread(f.app()).__enter__() for f in self.fakes]

    def url(self, i: int) -> str:
        return self.servers[i].url + "/v1"

    def stop(self, i: int) -> None:
        self.servers[i].__exit__()

    def close(self) -> None:
        for server in self.servers:
            if server.thread.is_alive():
                server.__exit__()


@pytest.fixture
def fakes() -> Iterator[Any]:
    made: list[Fakes] = []

    def make(count: int) -> Fakes:
        made.append(Fakes(count))
        return made[-1]

    yield make
    for group in made:
        group.close()


def chat(proxy: str, model: str, **more: Any) -> httpx.Response:
    body = {"model": model, "messages": ASK, **more}
    return httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=20)


def answer_text(r: httpx.Response) -> str:
    if not r.headers["content-type"].startswith("text/event-stream"):
        return str(r.json()["choices"][0]["message"]["content"])
    chunks = [orjson.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {") and '"choices"' in line]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_models_go_to_the_upstream_that_serves_them_and_aliases_are_rewritten(make_proxy, fakes):
    group = fakes(2)
    a, b = group.fakes
    proxy = make_proxy(probe_capabilities=False, upstreams=[
        {"name": "small", "url": group.url(0), "models": ["qwen2.5:0.5b"],
         "aliases": {"gpt-4o-mini": "qwen2.5:0.5b"}},
        {"name": "big", "url": group.url(1), "models": ["llama3.1:70b"]}])
    assert chat(proxy, "qwen2.5:0.5b").status_code == 200
    assert chat(proxy, "gpt-4o-mini").status_code == 200
    assert chat(proxy, "llama3.1:70b", stream=True).status_code == 200
    assert [r["model"] for r in a.requests] == ["qwen2.5:0.5b", "qwen2.5:0.5b"]
    assert [r["model"] for r in b.requests] == ["llama3.1:70b"]

    missing = chat(proxy, "mistral")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert "qwen2.5:0.5b" in missing.json()["error"]["message"]


def test_catch_all_upstream_takes_unnamed_models_and_v1_models_is_the_union(make_proxy, fakes):
    group = fakes(2)
    a, b = group.fakes
    proxy = make_proxy(probe_capabilities=False, upstreams=[
        {"name": "named", "url": group.url(0), "models": ["alpha"], "aliases": {"gpt-4o": "alpha"}},
        {"name": "ollama", "url": group.url(1), "models": ["*"]}])
    assert chat(proxy, "whatever:1b").status_code == 200
    assert [r["model"] for r in b.requests] == ["whatever:1b"] and not a.requests

    listed = openai.OpenAI(base_url=f"{proxy}/v1", api_key="unused").models.list()
    assert [(m.id, m.owned_by) for m in listed.data] == [("alpha", "named"), ("gpt-4o", "named"),
                                                         ("fake-model", None)]


def test_other_v1_paths_route_by_their_body_model(make_proxy, fakes):
    group = fakes(2)
    a, b = group.fakes
    proxy = make_proxy(upstreams=[
        {"name": "embed", "url": group.url(0), "models": ["nomic-embed"],
         "aliases": {"text-embedding-3-small": "nomic-embed"}},
        {"name": "rest", "url": group.url(1)}])
    r = httpx.post(f"{proxy}/v1/embeddings", json={"model": "text-embedding-3-small", "input": "x"})
    assert r.status_code == 201 and r.json()["path"] == "/v1/embeddings"
    assert b'"model":"nomic-embed"' in a.other_requests[0][2] and not b.other_requests
    assert httpx.get(f"{proxy}/v1/files", timeout=10).status_code == 200
    assert b.other_requests[0][:2] == ("GET", "/v1/files")


def test_auto_mode_decisions_are_kept_per_upstream_name(make_proxy, fakes):
    group = fakes(2)
    a, b = group.fakes
    proxy = make_proxy(probe_capabilities=False, upstreams=[
        {"name": "nojinja", "url": group.url(0), "models": ["m"]},
        {"name": "jinja", "url": group.url(1), "models": ["n"]}])
    a.push(Step(*LLAMA_NO_JINJA), Step(body=completion("prompted answer")))
    a.checks.append(Step(*LLAMA_NO_JINJA))
    assert chat(proxy, "m", tools=[WEATHER]).json()["sanctum"]["mode"] == "prompted"
    modes = wait_until(lambda: httpx.get(f"{proxy}/sanctum/status", timeout=5).json()["modes"], 5, "the flip")
    assert [(d["upstream"], d["model"], d["mode"]) for d in modes] == [("nojinja", "m", "prompted")]
    assert chat(proxy, "n", tools=[WEATHER]).json()["sanctum"]["mode"] == "native"
    assert "tools" in b.requests[0]


def test_pool_fails_over_when_a_backend_dies_mid_test(make_proxy, fakes):
    group = fakes(2)
    proxy = make_proxy(probe_capabilities=False, health_check_seconds=60, upstreams=[
        {"name": "pool", "urls": [group.url(0), group.url(1)]}])
    for _ in range(4):
        assert chat(proxy, "m").status_code == 200
    counts = [len(f.requests) for f in group.fakes]
    assert sorted(counts) == [0, 4]  # one conversation, one backend
    held = counts.index(4)
    other = group.fakes[1 - held]

    group.stop(held)
    for stream in (False, True, False, True):
        other.push(Step(chunks=content_chunks("still here")) if stream else Step(body=completion("still here")))
        r = chat(proxy, "m", stream=stream)
        assert r.status_code == 200 and answer_text(r) == "still here"
    assert len(group.fakes[held].requests) == 4 and len(other.requests) == 4
    backends = httpx.get(f"{proxy}/sanctum/status", timeout=5).json()["upstreams"][0]["backends"]
    assert [x["healthy"] for x in backends] == [i != held for i in range(2)]


def test_a_correction_round_goes_to_the_backend_of_its_first_round(make_proxy, fakes):
    group = fakes(2)
    proxy = make_proxy(probe_capabilities=False, upstreams=[{"name": "pool", "urls": [group.url(0), group.url(1)]}])
    wrong = Step(body=completion(None, [native_call("lookup_weather", '{"city":"Paris"}')], "tool_calls"))
    right = Step(body=completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls"))
    for n in range(6):  # conversations of their own (their openings differ)
        for fake in group.fakes:
            fake.requests.clear()
            fake.push(wrong, right)
        ask = [{"role": "user", "content": f"Weather in Paris, take {n}?"}]
        r = chat(proxy, "m", messages=ask, tools=[WEATHER], sanctum={"constrain": "off"})
        assert r.status_code == 200 and r.headers["x-sanctum-rounds"] == "2"
        assert sorted(len(f.requests) for f in group.fakes) == [0, 2]  # both rounds on one backend
        for fake in group.fakes:
            fake.steps.clear()


def test_turns_of_one_session_stay_on_one_backend(make_proxy, fakes):
    group = fakes(2)
    proxy = make_proxy(probe_capabilities=False, upstreams=[{"name": "pool", "urls": [group.url(0), group.url(1)]}])
    for turn in range(5):  # each turn a different conversation opening: the session header decides
        body = {"model": "m", "messages": [{"role": "user", "content": f"turn {turn}"}]}
        r = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=20,
                       headers={"X-Claude-Code-Session-Id": "3f2b-session"})
        assert r.status_code == 200
    assert sorted(len(f.requests) for f in group.fakes) == [0, 5]


def test_an_answer_that_started_is_never_retried_on_another_backend(make_proxy, fakes):
    group = fakes(2)
    proxy = make_proxy(probe_capabilities=False, upstreams=[
        {"name": "pool", "urls": [group.url(0), group.url(1)]}])
    for fake in group.fakes:
        fake.push(Step(status=500, body={"error": {"message": "boom"}}))
    r = chat(proxy, "m")
    assert r.status_code == 500 and r.json()["error"]["message"] == "boom"
    assert sum(len(f.requests) for f in group.fakes) == 1

    for fake in group.fakes:
        fake.steps.clear()
        fake.push(Step(chunks=content_chunks("cut off mid-answer"), die_after=3))
    r = chat(proxy, "m", stream=True)
    assert r.status_code == 200 and r.text.rstrip().splitlines()[-1].startswith('data: {"error"')
    assert sum(len(f.requests) for f in group.fakes) == 2


def test_every_backend_down_is_502_and_health_checks_mark_them(make_proxy, fakes):
    group = fakes(1)
    group.stop(0)
    dead = group.url(0)
    proxy = make_proxy(probe_capabilities=False, health_check_seconds=0.2, upstreams=[
        {"name": "pool", "urls": [dead, dead.replace("/v1", "/other/v1")]}])
    def checked() -> list[dict[str, Any]] | None:
        backends = httpx.get(f"{proxy}/sanctum/status", timeout=5).json()["upstreams"][0]["backends"]
        return backends if all(x["checked_at"] for x in backends) else None

    backends = wait_until(checked, 5, "a health check of every backend")
    assert [x["healthy"] for x in backends] == [False, False]
    r = chat(proxy, "m")
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_unreachable"
    ready = httpx.get(f"{proxy}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["upstreams"] == {"pool": False}


def test_without_upstreams_the_single_upstream_setting_works_as_before(client, fake):
    assert client.post("/v1/chat/completions", json={"model": "anything", "messages": ASK}).status_code == 200
    assert fake[0].requests[0]["model"] == "anything"
    assert client.get("/readyz").json() == {"status": "ready", "upstream": fake[1] + "/v1"}
    assert client.get("/v1/models").json()["data"][0]["id"] == "fake-model"


def test_the_upstreams_example_in_config_example_loads(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "config.example.toml").read_text()
    block = text[text.index("# [[upstreams]]"):]
    toml = tmp_path / "upstreams.toml"
    toml.write_text("\n".join(line.removeprefix("# ").removeprefix("#") for line in block.splitlines()))
    entries = load_settings({}, toml).upstreams
    shape = [(e.name, len(e.urls), e.catch_all) for e in entries]
    assert shape == [("ollama", 2, True), ("llamacpp", 1, False)]
    assert choose(entries, "gpt-4o-mini") == (0, "qwen2.5:7b")
    assert choose(entries, "qwen2.5-coder-7b") == (1, "qwen2.5-coder-7b")
