"""The container tier: the project's image built with podman on a locally made Debian base and run (see
podman.py). Skips with the reason where podman is missing or cannot run; with SANCTUM_CONTAINER_REQUIRED=1
(.ci/run, where podman runs) a setup failure fails instead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ServerThread
from tests.deploy import podman
from tests.fakes.upstream import FakeUpstream, ollama_responder


def _unusable(reason: str) -> None:
    if podman.required():
        pytest.fail(f"{podman.REQUIRED_ENV}=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def base_image() -> str:
    reason = podman.unavailable()
    if reason is not None:
        _unusable(f"container tier skipped: {reason}")
    try:
        return podman.base_image()
    except (RuntimeError, OSError) as exc:
        _unusable(f"container tier skipped: no Debian base image: {exc}")
        raise


@pytest.fixture(scope="session")
def proxy_image(base_image: str) -> str:
    try:
        return podman.build("localhost/sanctum-proxy:test", base=base_image)
    except (RuntimeError, OSError) as exc:
        _unusable(f"container tier skipped: the image did not build: {exc}")
        raise


@pytest.fixture
def fake_ollama() -> Iterator[tuple[FakeUpstream, str]]:
    """The scripted fake Ollama on the host's loopback, which containers on the host network reach."""
    upstream = FakeUpstream(responder=ollama_responder)
    with ServerThread(upstream.app()) as server:
        yield upstream, server.url
