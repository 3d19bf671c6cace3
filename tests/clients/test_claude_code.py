"""Claude Code (npm @anthropic-ai/claude-code, pinned in tests/agents/claude-code, installed by .ci/run) in its
default configuration, `claude -p`, through the proxy's /v1/messages in front of the scripted fake upstream whose
model fumbles the Write call (tests/clients/claude_code_model.py): each scenario must end with the file written
by Claude Code's own Write tool and the model's final answer quoting Write's result.

Claude Code runs with a dummy key, telemetry, auto-update, error reporting and non-essential traffic off, HOME and
the working directory temporary; `--permission-mode acceptEdits` lets `-p` (no one to ask) write files, as a user
of `-p` does. The surrender scenario measures the `last_call` default (docs/repair.md, "After the last repair round").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.clients.claude_code_model import FILE, SCENARIOS, TASK, TEXT, ClaudeCodeModel

CLI = Path(__file__).resolve().parents[1] / "agents" / "claude-code" / "node_modules" / ".bin" / "claude"
VERSION = "2.1.332"  # tests/agents/claude-code/package.json


def installed() -> bool:
    """The pinned CLI runs (an install whose postinstall did not put the native binary in place does not)."""
    try:
        shown = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return shown.returncode == 0 and VERSION in shown.stdout


pytestmark = pytest.mark.skipif(not installed(), reason=f"Claude Code {VERSION} is not installed ({CLI}): run "
                                "`npm ci` in tests/agents/claude-code (.ci/run does where npm and the registry work)")


def run_claude(proxy: str, workdir: str, task: str = TASK, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    home = tempfile.mkdtemp(prefix="claude-home-")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "ANTHROPIC_BASE_URL": proxy,
           "ANTHROPIC_API_KEY": "sk-dummy", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    try:
        return subprocess.run([str(CLI), "-p", task, "--permission-mode", "acceptEdits"], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)


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
