"""The image as `docker run` beside Ollama uses it: built from the Dockerfile, run as uid 10001 with the
health check passing, answering a tools request with the repaired call, and keeping its traces in the volume
across a restart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sanctum_proxy.upstreams.embedded import free_port
from tests.deploy import podman
from tests.fakes.upstream import BROKEN_HERMES, FakeUpstream
from tests.polling import wait_until
from tests.tools import WEATHER_DESCRIBED as WEATHER

ASK = {"model": "qwen2.5:3b", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}


def wait_healthy(url: str, name: str, timeout: float = 60) -> None:
    wait_until(lambda: httpx.get(url + "/healthz", timeout=2).status_code == 200, timeout, f"{name}'s /healthz",
               every=0.2, ignoring=(httpx.HTTPError,),
               detail=lambda: str(podman.podman("logs", name, check=False).stderr[-2000:]))


@pytest.fixture
def container(proxy_image: str, fake_ollama: tuple[FakeUpstream, str]) -> Iterator[dict[str, Any]]:
    name, volume, port = f"sanctum-test-{uuid.uuid4().hex[:8]}", f"sanctum-test-{uuid.uuid4().hex[:8]}", free_port()
    podman.podman("volume", "create", volume)
    try:
        podman.run("--name", name, "--network", "host", "-e", f"SANCTUM_UPSTREAM={fake_ollama[1]}/v1",
                   "-e", f"SANCTUM_PORT={port}", "-e", "SANCTUM_HOST=127.0.0.1", "-v", f"{volume}:/data",
                   proxy_image)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, name)
        yield {"name": name, "url": url, "fake": fake_ollama[0]}
    finally:
        podman.remove(name)
        podman.remove(volume, kind=("volume", "rm", "-f"))


def test_runs_as_uid_10001_and_its_healthcheck_passes(container):
    assert podman.podman("exec", container["name"], "id", "-u").stdout.strip() == "10001"
    user = podman.podman("inspect", container["name"], "--format", "{{.Config.User}}").stdout.strip()
    assert user == "10001:10001"
    # The HEALTHCHECK survived the build (--format docker; OCI images drop it) and passes.
    check = podman.podman("inspect", container["name"], "--format", "{{.Config.Healthcheck.Test}}").stdout
    assert "/healthz" in check
    assert podman.podman("healthcheck", "run", container["name"], check=False).returncode == 0


def test_a_broken_hermes_call_from_ollama_comes_back_as_the_repaired_call(container):
    r = httpx.post(container["url"] + "/v1/chat/completions", json=ASK, timeout=30)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert r.headers["x-sanctum-omens"] == "SpellCallRepaired=1" and r.headers["x-sanctum-rounds"] == "1"
    assert container["fake"].requests[0]["tools"][0]["function"]["name"] == "get_weather"
    omen = r.json()["sanctum"]["omens"][0]  # the call the fake wrote (BROKEN_HERMES), mended locally
    assert {"hermes_in_content", "single_quotes", "trailing_comma"} <= set(omen["repairs"])
    assert omen["raw"] in BROKEN_HERMES


def test_traces_persist_in_the_volume_across_a_restart(container):
    r = httpx.post(container["url"] + "/v1/chat/completions", json=ASK, timeout=30)
    trace_id = r.headers["x-sanctum-trace-id"]
    podman.podman("restart", "-t", "5", container["name"])
    wait_healthy(container["url"], container["name"])
    trace = httpx.get(f"{container['url']}/sanctum/traces/{trace_id}", timeout=10)
    assert trace.status_code == 200 and trace.json()["outcome"] == "repaired"
    # The file is the volume's and the proxy's user owns it.
    owner = podman.podman("exec", container["name"], "stat", "-c", "%u", "/data/traces.sqlite3").stdout.strip()
    assert owner == "10001"


def test_the_image_size_is_reported(proxy_image, capsys):
    size = podman.image_size(proxy_image)
    with capsys.disabled():
        print(f"\n[container tier] {proxy_image}: {size / 1e6:.0f} MB on the Debian bookworm base")
    assert 100e6 < size < 1e9
