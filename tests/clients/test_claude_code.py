"""Claude Code (npm @anthropic-ai/claude-code, pinned in tests/agents/claude-code, installed by .ci/run) in its
default configuration, `claude -p`, through the proxy's /v1/messages in front of the scripted fake upstream whose
model fumbles the Write call (tests/clients/claude_code_model.py): each scenario must end with the file written
by Claude Code's own Write tool and the model's final answer quoting Write's result.

Claude Code runs as tests/clients/claude_code_cli.py sets it up, in a temporary working directory. The surrender
scenario measures the `last_call` default (docs/repair.md, "After the last repair round").
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.clients.claude_code_cli import CLI, INSTALL, VERSION, installed, run_claude
from tests.clients.claude_code_model import FILE, SCENARIOS, TEXT, ClaudeCodeModel

pytestmark = pytest.mark.skipif(not installed(), reason=f"Claude Code {VERSION} is not installed ({CLI}): {INSTALL}")


@pytest.fixture
def workdir() -> Any:
    path = tempfile.mkdtemp(prefix="claude-work-")
    yield os.path.realpath(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_claude_code_finishes_the_task_through_the_proxy(fake, make_proxy, workdir, scenario):
    model = ClaudeCodeModel(scenario)
    fake[0].responder = model
    done = run_claude(make_proxy(), workdir)
    written = Path(workdir, FILE)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert written.exists() and written.read_text() == TEXT, done.stdout[-2000:]
    assert "Done. The Write tool said:" in done.stdout and FILE in done.stdout
    assert all(r.get("stream") for r in model.requests if r.get("tools"))  # Claude Code streams, and so do rounds
    if scenario == "surrender":  # the model learnt from Claude Code's own validation error, not from the proxy
        assert len(model.tool_errors) == 1 and "content" in model.tool_errors[0], model.tool_errors
    else:
        assert model.tool_errors == []


def test_claude_codes_request_reaches_the_upstream_as_a_plain_chat_request(fake, make_proxy, workdir):
    # What Claude Code 2.1.332 sends (module docstring of claude_code_model.py) as the upstream sees it: its system
    # blocks and the environment `system` message after the user's turn merged into one leading system message (no
    # billing line), its 12 tools as functions, none of its client-only fields.
    model = ClaudeCodeModel("malformed_args")
    fake[0].responder = model
    run_claude(make_proxy(), workdir)
    first = model.requests[0]
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user"] and "Primary working directory" in first["messages"][0]["content"]
    assert "x-anthropic-billing-header" not in first["messages"][0]["content"]
    names = [t["function"]["name"] for t in first["tools"]]
    assert len(names) == 12 and {"Bash", "Read", "Write", "Edit"} <= set(names)
    assert not {"thinking", "context_management", "output_config", "metadata", "thread"} & set(first)
    assert first["stream"] is True and first["model"].startswith("claude-")
