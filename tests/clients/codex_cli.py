"""Runs the Codex CLI pinned in tests/agents/codex (`codex exec`) against a base URL, as its users would: a
custom model provider speaking the Responses API, every other setting at its default (web_search and
multi_agent on), the workspace-write sandbox in a temporary working directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CODEX_DIR = Path(__file__).parent.parent / "agents" / "codex"
CODEX = CODEX_DIR / "node_modules" / ".bin" / "codex"
VERSION = "0.171.0"  # tests/agents/codex/package.json


def need_codex() -> None:
    if shutil.which("node") is None or not CODEX.exists():
        pytest.skip("Codex CLI not installed (npm ci in tests/agents/codex)", allow_module_level=True)


@dataclass
class Run:
    returncode: int
    events: list[dict[str, Any]]  # `codex exec --json` lines
    stderr: str
    workdir: Path

    def final_text(self) -> str:
        """The agent's last message of the turn."""
        texts = [e["item"].get("text", "") for e in self.events if e.get("type") == "item.completed"
                 and e.get("item", {}).get("type") == "agent_message"]
        return texts[-1] if texts else ""

    def commands(self) -> list[dict[str, Any]]:
        return [e["item"] for e in self.events if e.get("type") == "item.completed"
                and e.get("item", {}).get("type") == "command_execution"]


def config(base_url: str, model: str) -> str:
    return (f'model = "{model}"\nmodel_provider = "sanctum"\n\n[model_providers.sanctum]\nname = "sanctum-proxy"\n'
            f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "SANCTUM_KEY"\n')


def run_codex(base_url: str, task: str, home: Path, *, model: str = "m", timeout: float = 240) -> Run:
    """`codex exec --json` on `task` in a fresh working directory under `home`."""
    codex_home, workdir = home / "codex-home", home / "work"
    codex_home.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config(base_url, model))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(codex_home), SANCTUM_KEY="x", NO_COLOR="1", RUST_LOG="error")
    # The timeout only turns a hang into a failure; a passing run takes a few seconds.
    done = subprocess.run([str(CODEX), "exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write",
                           "--cd", str(workdir), task], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return Run(done.returncode, events, done.stderr, workdir)
