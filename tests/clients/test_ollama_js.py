"""ollama-js (tests/clients/ollama-js, installed by .ci/run) in its default configuration, pointed at the
proxy's root in front of the fake Ollama: each scenario's tool loop ends with the tool's result, streamed and
not, the client's options reaching /api/chat each round; discovery answers. Skipped where node or the package is
missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.ollama_model import CITY, SCENARIOS, not_kept, weather

HERE = Path(__file__).parent / "ollama-js"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (HERE / "node_modules" / "ollama").is_dir(),
    reason="node or tests/clients/ollama-js/node_modules/ollama missing (npm ci in tests/clients/ollama-js)")
OPTIONS = {"num_ctx": 8192, "top_k": 20, "temperature": 0.2}


def run_loop(root: str, model: str, stream: bool, think: bool = False) -> dict[str, Any]:
    # The timeout only turns a hang into a failure; a passing run takes about a second.
    run = subprocess.run(["node", str(HERE / "tool_loop.mjs"), root, model, "1" if stream else "0",
                          "1" if think else "0"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_tool_loop_ends_with_the_tools_result(ollama_scripted, scenario, stream):
    root, model = ollama_scripted(scenario)
    out = run_loop(root, model.model, stream, think=scenario == "think")
    assert "error" not in out, out
    assert out["ran"] == [{"city": CITY}] and weather(CITY) in out["text"]
    assert all(bool(r.get("stream")) == stream for r in model.requests)
    if scenario == "think":
        assert out["thinking"][0].startswith("The user wants the weather")
    discovery = out["discovery"]
    assert discovery["version"] == "0.33.0" and "llama3.2:1b" in discovery["models"]
    assert "tools" in discovery["capabilities"] and discovery["ps"] == ["qwen3:0.6b"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", ["native", "content_fenced", "think"])
def test_the_clients_options_reach_ollama_on_every_round(ollama_scripted, fake_ollama, scenario, stream):
    root, model = ollama_scripted(scenario)
    out = run_loop(root, model.model, stream, think=scenario == "think")
    assert weather(CITY) in out.get("text", ""), out
    think = {"think": True} if scenario == "think" else {}
    assert not_kept(fake_ollama[0], model, options=OPTIONS, keep_alive="10m", **think) == []


def test_directly_a_call_in_content_never_reaches_the_tool(ollama_scripted):
    root, model = ollama_scripted("content_hermes", "direct")
    out = run_loop(root, model.model, False)
    assert out["ran"] == [] and "<tool_call>" in out["text"]
