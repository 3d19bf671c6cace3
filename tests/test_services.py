"""The app's parts behind one typed accessor (sanctum_proxy/services.py): built once by create_app, the upstream
pools made when the app starts, and every route reading them through `services(request)`."""

from __future__ import annotations

import httpx
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from sanctum_proxy.services import Services
from tests.conftest import ServerThread


def test_the_parts_are_built_once_and_the_pools_wait_for_the_start() -> None:
    settings = load_settings({"upstream": "http://127.0.0.1:9/v1", "traces_path": ":memory:"})
    app = create_app(settings)
    parts = app.state.services
    assert isinstance(parts, Services)
    assert parts.settings is settings
    assert parts.keys is not None and parts.modes is not None and parts.capabilities is not None
    with pytest.raises(RuntimeError, match="when the app starts"):
        parts.pools  # noqa: B018 - the property raises before the lifespan made them


def test_a_started_app_answers_from_its_services(fake) -> None:  # type: ignore[no-untyped-def]
    _, url = fake
    app = create_app(load_settings({"upstream": url + "/v1", "traces_path": ":memory:"}))
    with ServerThread(app) as proxy:
        parts = app.state.services
        assert parts.pools.default.root_url.startswith(url)
        parts.modes.settle("an-upstream", "a-model", "prompted", "tools_rejected")  # the route must show this one
        status = httpx.get(proxy.url + "/sanctum/status", timeout=10)  # settings, modes, capabilities of `parts`
        assert status.status_code == 200
        body = status.json()
        assert [m["model"] for m in body["modes"]] == ["a-model"]
        assert body["modes"] == parts.modes.snapshot() and body["capabilities"] == parts.capabilities.snapshot()
        assert httpx.get(proxy.url + "/healthz", timeout=10).status_code == 200
