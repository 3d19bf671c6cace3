"""Claude Code pinned in tests/agents/claude-code, run as `claude -p` in its default configuration."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.clients.claude_code_model import TASK

CLI = Path(__file__).resolve().parents[1] / "agents" / "claude-code" / "node_modules" / ".bin" / "claude"
VERSION = "2.1.332"  # tests/agents/claude-code/package.json
INSTALL = "run `npm ci` in tests/agents/claude-code (.ci/run does where npm and the registry work)"


def installed() -> bool:
    """The pinned CLI runs (a failed postinstall leaves no native binary)."""
    try:
        shown = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return shown.returncode == 0 and VERSION in shown.stdout


def run_claude(proxy: str, workdir: str, task: str = TASK, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`claude -p task` against `proxy` (its root), a dummy key, telemetry and updates off, HOME temporary;
    `acceptEdits`, as `-p` asks no one."""
    home = tempfile.mkdtemp(prefix="claude-home-")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "ANTHROPIC_BASE_URL": proxy,
           "ANTHROPIC_API_KEY": "sk-dummy", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    try:
        return subprocess.run([str(CLI), "-p", task, "--permission-mode", "acceptEdits"], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
