"""Fixtures for the agent-framework tier: the proxy in front of the fake upstream (or the fake Ollama) answered by
a scenario model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.clients.scenarios import Model
from tests.fakes.ollama_model import OllamaModel


@pytest.fixture
def scripted(fake: Any, make_proxy: Any) -> Callable[..., tuple[str, Model]]:
    """scripted(scenario, **settings) -> (the proxy's /v1 base URL, the model answering behind it)."""

    def start(scenario: str, **settings: Any) -> tuple[str, Model]:
        model = Model(scenario)
        fake[0].responder = model
        return make_proxy(**settings) + "/v1", model

    return start


@pytest.fixture
def ollama_scripted(fake_ollama: Any, make_proxy: Any) -> Callable[..., tuple[str, OllamaModel]]:
    """ollama_scripted(scenario, via="proxy") -> (the root URL a native client is given, the model answering
    behind the fake Ollama). `via="direct"` is the fake Ollama itself, for the fumbles as a client sees them."""

    def start(scenario: str, via: str = "proxy") -> tuple[str, OllamaModel]:
        model = OllamaModel(scenario)
        fake_ollama[0].responder = model
        root = fake_ollama[1] if via == "direct" else make_proxy(upstream=fake_ollama[1] + "/v1")
        return root, model

    return start
