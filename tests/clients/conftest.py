"""Fixtures for the agent-framework tier: the proxy in front of the fake upstream answered by a scenario model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.clients.scenarios import Model


@pytest.fixture
def scripted(fake: Any, make_proxy: Any) -> Callable[..., tuple[str, Model]]:
    """scripted(scenario, **settings) -> (the proxy's /v1 base URL, the model answering behind it)."""

    def start(scenario: str, **settings: Any) -> tuple[str, Model]:
        model = Model(scenario)
        fake[0].responder = model
        return make_proxy(**settings) + "/v1", model

    return start
