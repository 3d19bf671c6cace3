"""llama-index's FunctionAgent on its Ollama LLM in its default configuration (`base_url` the proxy's root,
/api/chat), in front of the fake Ollama whose model fumbles its calls, streamed and not. It lives in
tests/clients/.venv-llama-index (llama-index requires openai<3) and runs as a subprocess:
tests/clients/llama_index_ollama_loop.py. It asks /api/show for the model's context length and sends it as
`num_ctx` on every request, so discovery and options are checked too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.ollama_model import CITY, SCENARIOS, not_kept, weather

HERE = Path(__file__).parent
PYTHON = HERE / ".venv-llama-index" / "bin" / "python"
OLLAMA_LLM = "lib/python*/site-packages/llama_index/llms/ollama"
if not PYTHON.exists() or not list((HERE / ".venv-llama-index").glob(OLLAMA_LLM)):
    pytest.skip("llama-index-llms-ollama missing in tests/clients/.venv-llama-index (made by .ci/run)",
                allow_module_level=True)


def run_loop(root: str, model: str, stream: bool, think: bool = False) -> dict[str, Any]:
    # The timeout only turns a hang into a failure; a passing run takes a few seconds.
    run = subprocess.run([str(PYTHON), str(HERE / "llama_index_ollama_loop.py"), root, model,
                          "1" if stream else "0", "1" if think else "0"], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_function_agent_runs_the_tool_and_answers_with_its_result(ollama_scripted, scenario, stream):
    root, model = ollama_scripted(scenario)
    out = run_loop(root, model.model, stream, think=scenario == "think")
    assert "error" not in out, out
    assert out["calls"] == [CITY] and weather(CITY) in out["text"]
    assert all(bool(r.get("stream")) == stream for r in model.requests)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", ["native", "swallowed"])
def test_the_shown_context_length_reaches_ollama_as_num_ctx_on_every_round(ollama_scripted, fake_ollama, scenario,
                                                                          stream):
    root, model = ollama_scripted(scenario)
    out = run_loop(root, model.model, stream)
    assert weather(CITY) in out.get("text", ""), out
    # llama-index sends the shown `llama.context_length` as num_ctx, and its unset temperature as null
    options = {"temperature": None, "num_ctx": 131072}
    assert not_kept(fake_ollama[0], model, options=options, keep_alive="10m") == []
