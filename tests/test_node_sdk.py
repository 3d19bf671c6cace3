"""openai-node (tests/node, installed by .ci/run) accumulates the proxy's streamed calls unchanged, with omens
as comments and as events. Skipped where node or the package is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fakes.upstream import Step, content_chunks, llama_tool_chunks

NODE_DIR = Path(__file__).parent / "node"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir(),
    reason="node or tests/node/node_modules/openai missing (npm ci in tests/node)")

TWO_CALLS = ('Checking both. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
             "<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Rome',}}</tool_call>")


@pytest.mark.parametrize("omens", ["comments", "events"])
def test_openai_node_accumulates_the_streamed_calls(proxy, fake, omens):
    fake[0].push(Step(chunks=content_chunks(TWO_CALLS, size=3)),
                 Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')))
    run = subprocess.run(["node", str(NODE_DIR / "stream_calls.mjs"), proxy + "/v1", omens],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    helper = out["helper"]
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for c in helper["message"]["tool_calls"]]
    assert calls == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert helper["message"]["content"] == "Checking both." and helper["finish_reason"] == "tool_calls"
    assert out["raw"] == {"content": "", "names": ["get_weather"], "finish": "tool_calls"}
