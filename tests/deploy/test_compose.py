"""deploy/docker-compose.yml run by podman-compose (from PyPI), with an override file that only swaps what this
machine cannot have: the ollama service runs the scripted fake Ollama (tests/fakes/upstream.py on the proxy
image's Python) instead of the ollama/ollama image, with a health check that needs no `ollama` binary, and the
proxy's image is the one the container tier built (no registry, so no python:3.11-slim to build from). The
proxy reaches the fake by its compose service name, as it reaches Ollama, and answers on the published port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from sanctum_proxy.upstreams.embedded import free_port
from tests.deploy import podman
from tests.polling import wait_until
from tests.tools import WEATHER_DESCRIBED as WEATHER

COMPOSE = podman.ROOT / "deploy" / "docker-compose.yml"
ASK = {"model": "qwen2.5:3b", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}


def podman_compose() -> list[str] | None:
    found = shutil.which("podman-compose") or shutil.which("podman-compose", path=str(Path(sys.executable).parent))
    return [found] if found else None


def override(image: str) -> dict[str, object]:
    probe = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:11434/v1/models', timeout=2)"
    return {"services": {
        "ollama": {"image": image, "working_dir": "/src",
                   "entrypoint": ["python", "-m", "tests.fakes.upstream", "--host", "0.0.0.0", "--port", "11434"],
                   "volumes": [f"{podman.ROOT / 'tests'}:/src/tests:ro"],
                   "healthcheck": {"test": ["CMD", "python", "-c", probe]}},
        "sanctum-proxy": {"image": image},
    }}


@pytest.fixture
def compose(proxy_image: str, tmp_path: Path) -> Iterator[str]:
    command = podman_compose()
    if command is None:  # a registry package (.ci/run installs it and says so when it cannot)
        pytest.skip("podman-compose not installed (pip install podman-compose==1.5.0)")
    extra = tmp_path / "compose.override.yml"
    extra.write_text(yaml.safe_dump(override(proxy_image)))
    port, project = free_port(), f"sanctum-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SANCTUM_HOST_PORT": str(port), "CONTAINERS_CONF": str(podman.containers_conf())}
    base = [*command, "-p", project, "-f", str(COMPOSE), "-f", str(extra)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=300)

    try:
        up = run("up", "-d", "--no-build")
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        url = f"http://127.0.0.1:{port}"
        def logs() -> str:
            out = run("logs")
            return out.stdout[-3000:] + out.stderr[-2000:]

        # ready: the fake Ollama answers
        wait_until(lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200, 60, "the compose proxy's /readyz",
                   every=0.5, ignoring=(httpx.HTTPError,), detail=logs)
        yield url
    finally:
        run("down", "-v", "-t", "2")


def test_compose_proxy_answers_beside_the_ollama_service_with_the_repaired_call(compose):
    r = httpx.post(compose + "/v1/chat/completions", json=ASK, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert r.headers["x-sanctum-omens"] == "SpellCallRepaired=1"
    # The upstream it named is the compose file's, reached by the service name.
    trace = httpx.get(f"{compose}/sanctum/traces/{r.headers['x-sanctum-trace-id']}", timeout=10).json()
    assert trace["upstream"] == "http://ollama:11434/v1"
