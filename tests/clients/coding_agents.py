"""The coding agents of the agent tier beside Claude Code and Codex, each run headless in its default
configuration against a base URL the way its docs point it at a local OpenAI-compatible server: opencode, Qwen
Code, Continue's `cn`, goose and llm. Each runs with a temporary HOME and working directory and a dummy key;
docs/clients.md says how each is pointed, as measured here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

AGENTS_DIR = Path(__file__).resolve().parents[1] / "agents"
Runner = Callable[[str, str, Path, float], subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class Agent:
    """One agent: its pinned version, its binary, how it runs a task, and its file-writing tool as its first
    request names it (the tool, the path argument, the content argument)."""

    name: str
    version: str
    binary: Path
    install: str  # how the binary gets here
    runner: Runner
    tool: str
    path_key: str
    content_key: str

    def installed(self) -> bool:
        """The pinned version runs."""
        if not self.binary.exists():
            return False
        try:
            shown = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=60,
                                   env=_env(Path("/tmp")), stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return self.version in shown.stdout + shown.stderr

    def run(self, base_url: str, task: str, home: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """The agent on `task`, its working directory `home / "work"`, against `base_url` (ending in /v1); a run
        past `timeout` seconds raises subprocess.TimeoutExpired."""
        (home / "work").mkdir(parents=True, exist_ok=True)
        return self.runner(base_url, task, home, timeout)


def _env(home: Path, **more: str) -> dict[str, str]:
    """A clean environment: PATH, a temporary HOME, no colours; nothing of the caller's keys or configs."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NO_COLOR": "1", "TERM": "dumb",
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
           "XDG_STATE_HOME": str(home / ".local/state"), "XDG_CACHE_HOME": str(home / ".cache")}
    env.update(more)
    return env


def _run(argv: list[str], home: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    # The timeout only turns a hang into a failure; a passing run on the scripted fake takes seconds.
    return subprocess.run(argv, cwd=home / "work", env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def run_opencode(base_url: str, task: str, home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`opencode run`, a custom provider (`@ai-sdk/openai-compatible`) in the project's opencode.json."""
    config = {"$schema": "https://opencode.ai/config.json", "model": "sanctum/m", "autoupdate": False,
              "share": "disabled",
              "provider": {"sanctum": {"npm": "@ai-sdk/openai-compatible", "name": "sanctum-proxy",
                                       "options": {"baseURL": base_url, "apiKey": "sk-dummy"},
                                       "models": {"m": {"name": "m", "tool_call": True}}}}}
    (home / "work" / "opencode.json").write_text(json.dumps(config))
    env = _env(home, OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
               OPENCODE_DISABLE_LSP_DOWNLOAD="1", OPENCODE_DISABLE_DEFAULT_PLUGINS="1")
    return _run([str(OPENCODE.binary), "run", "--print-logs", task], home, env, timeout)


def run_qwen(base_url: str, task: str, home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`qwen -p` with the OpenAI auth type from OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL, `--yolo` (no one to
    approve a write headless)."""
    env = _env(home, OPENAI_BASE_URL=base_url, OPENAI_API_KEY="sk-dummy", OPENAI_MODEL="m")
    return _run([str(QWEN.binary), "-p", task, "--auth-type", "openai", "--yolo"], home, env, timeout)


def run_continue(base_url: str, task: str, home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`cn -p` with a config.yaml naming an `openai` model at `apiBase`; `--allow Write` (headless asks no one)."""
    config = home / "continue.yaml"
    config.write_text(f"name: sanctum\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: m\n    provider: openai\n"
                      f"    model: m\n    apiBase: {base_url}\n    apiKey: sk-dummy\n    roles: [chat, edit, apply]\n")
    env = _env(home, CONTINUE_TELEMETRY_ENABLED="0", CONTINUE_GLOBAL_DIR=str(home / ".continue"))
    return _run([str(CONTINUE.binary), "-p", task, "--config", str(config), "--allow", "Write"], home, env, timeout)


def run_goose(base_url: str, task: str, home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`goose run -t` with the openai provider from the environment (OPENAI_HOST the origin, OPENAI_BASE_PATH the
    chat path); its default developer extension on, GOOSE_MODE auto (its default)."""
    origin, _, _ = base_url.removesuffix("/").rpartition("/v1")
    env = _env(home, GOOSE_PROVIDER="openai", GOOSE_MODEL="m", OPENAI_API_KEY="sk-dummy", OPENAI_HOST=origin,
               OPENAI_BASE_PATH="v1/chat/completions", GOOSE_DISABLE_KEYRING="1", GOOSE_TELEMETRY_ENABLED="false",
               GOOSE_CLI_THEME="ansi")
    return _run([str(GOOSE.binary), "run", "--no-session", "-t", task], home, env, timeout)


def run_llm(base_url: str, task: str, home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`llm` with an OpenAI-compatible model from extra-openai-models.yaml and llm-tools-patch's tools (`-T Patch`,
    `--chain-limit` at its default)."""
    user = home / "llm"
    user.mkdir(parents=True, exist_ok=True)
    (user / "extra-openai-models.yaml").write_text(f"- model_id: sanctum\n  model_name: m\n  api_base: {base_url}\n"
                                                   "  supports_tools: true\n  api_key_name: sanctum\n")
    (user / "keys.json").write_text(json.dumps({"sanctum": "sk-dummy"}))
    env = _env(home, LLM_USER_PATH=str(user))
    return _run([str(LLM.binary), "-m", "sanctum", "-T", "Patch", "--td", task], home, env, timeout)


def _llm_binary() -> Path:
    found = shutil.which("llm", path=os.path.dirname(sys.executable)) or shutil.which("llm")
    return Path(found) if found else Path("/nonexistent/llm")


OPENCODE = Agent("opencode", "1.18.33", AGENTS_DIR / "opencode/node_modules/.bin/opencode",
                 "npm ci in tests/agents/opencode", run_opencode, "write", "filePath", "content")
QWEN = Agent("qwen-code", "0.24.4", AGENTS_DIR / "qwen-code/node_modules/.bin/qwen",
             "npm ci in tests/agents/qwen-code", run_qwen, "write_file", "file_path", "content")
CONTINUE = Agent("continue", "1.5.47", AGENTS_DIR / "continue/node_modules/.bin/cn",
                 "npm ci in tests/agents/continue", run_continue, "Write", "filepath", "content")
GOOSE = Agent("goose", "1.52.0", AGENTS_DIR / "goose/node_modules/@aaif/goose-binary-linux-x64/bin/goose",
              "npm ci in tests/agents/goose", run_goose, "write", "path", "content")
LLM = Agent("llm", "0.36", _llm_binary(), "pip install -r tests/clients/requirements.txt", run_llm,
            "Patch_write", "file_path", "content")
AGENTS = {a.name: a for a in (OPENCODE, QWEN, CONTINUE, GOOSE, LLM)}
