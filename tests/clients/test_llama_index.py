"""llama-index's FunctionAgent on OpenAILike through the proxy, streamed and not.

llama-index 0.14 (the first with FunctionAgent is 0.12) requires openai<3 while the suite runs openai 3, so it
lives in a venv of its own, tests/clients/.venv-llama-index (made by .ci/run from
tests/clients/requirements-llama-index.txt), and runs as a subprocess: tests/clients/llama_index_loop.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.clients.scenarios import CITY, WORKING, weather

HERE = Path(__file__).parent
PYTHON = HERE / ".venv-llama-index" / "bin" / "python"
if not PYTHON.exists():
    pytest.skip("tests/clients/.venv-llama-index missing (made by .ci/run)", allow_module_level=True)


def run_loop(base_url: str, stream: bool) -> dict[str, Any]:
    # The timeout only turns a hang into a failure; a passing run takes a few seconds.
    run = subprocess.run([str(PYTHON), str(HERE / "llama_index_loop.py"), base_url, "1" if stream else "0"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", WORKING)
def test_function_agent_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    out = run_loop(base_url, stream)
    assert "error" not in out, out
    assert out["calls"] == [CITY]
    assert weather(CITY) in out["text"]
    assert model.streamed(stream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_surrender_surfaces_as_an_api_error(scripted, stream):
    base_url, model = scripted("surrender", on_surrender="error")  # the error, asked for
    out = run_loop(base_url, stream)
    assert out["calls"] == []
    assert "could not be repaired" in out["error"]["message"], out
    # openai's own errors, as llama-index lets them through: the 422, or the streamed in-band error event
    assert out["error"]["name"] == ("APIError" if stream else "UnprocessableEntityError")
