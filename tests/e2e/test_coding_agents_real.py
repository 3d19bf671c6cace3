"""The seven coding agents, headless in their default configuration, on one task through the proxy in front of
the real llama-server (the embedded default, but at SmolLM2's trained context of 8,192 tokens).

The 135M model does not do the task reliably, so the tests hold what the proxy owes: every answer complete and
valid or a clear error (tests/clients/exchanges.py), and the agent ending by itself within the bound. An agent
whose request cannot fit gets `context_length_exceeded` naming both sizes and exits non-zero.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from sanctum_proxy.upstreams.embedded import LlamaServer
from tests.clients import claude_code_cli, codex_cli
from tests.clients.coding_agents import AGENTS
from tests.clients.exchanges import Exchange, Recorder, verdict
from tests.clients.write_scenarios import FILE, TASK
from tests.conftest import ServerThread
from tests.polling import wait_until

CONTEXT = 8192
BOUND = 1200  # seconds before a run counts as a hang
# Over 8,192 tokens prompted (docs/clients.md).
TOO_LONG = {"claude-code", "codex", "qwen-code"}
SHOWN = {"codex": "ran out of room in the model's context window"}  # Codex's own words for the code
NAMES = ["claude-code", "codex", "opencode", "qwen-code", "continue", "goose", "llm"]


@pytest.fixture
def proxy(llama_agents: LlamaServer) -> Iterator[tuple[str, Recorder]]:
    # a first round of 7,000 tokens can take minutes on two busy cores
    settings = load_settings({"upstream": llama_agents.base_url, "constrain": "always", "read_timeout": BOUND,
                              "traces_path": ":memory:"})
    recorder = Recorder(create_app(settings))
    with ServerThread(recorder) as server:
        yield server.url, recorder


def need(name: str) -> None:
    if name == "claude-code":
        ready, how = claude_code_cli.installed(), claude_code_cli.INSTALL
    elif name == "codex":
        ready, how = codex_cli.CODEX.exists(), "npm ci in tests/agents/codex"
    else:
        ready, how = AGENTS[name].installed(), AGENTS[name].install
    if not ready:
        pytest.skip(f"{name} is not installed: {how}")


def run(name: str, root: str, home: Path) -> tuple[int, str]:
    """The exit status and all it printed."""
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    if name == "claude-code":
        done = claude_code_cli.run_claude(root, str(work), TASK, BOUND)
        return done.returncode, done.stdout + done.stderr
    if name == "codex":
        ran = codex_cli.run_codex(root + "/v1", TASK, home, timeout=BOUND)
        return ran.returncode, "\n".join(json.dumps(e) for e in ran.events) + ran.stderr
    done = AGENTS[name].run(root + "/v1", TASK, home, BOUND)
    return done.returncode, done.stdout + done.stderr


def task_rounds(recorder: Recorder) -> list[Exchange]:
    """The requests offering tools (not a title or memory side request)."""
    return [e for e in recorder.rounds() if (e.body() or {}).get("tools")]


@pytest.mark.parametrize("name", NAMES)
def test_agent_runs_a_task_through_the_proxy_on_the_real_model(name: str, proxy: tuple[str, Recorder],
                                                                tmp_path: Path) -> None:
    need(name)
    root, recorder = proxy
    started = time.monotonic()
    try:
        status, printed = run(name, root, tmp_path)
    except subprocess.TimeoutExpired as hang:
        pytest.fail(f"{name} still running after {BOUND} s; answers so far: "
                    f"{[(e.path, e.status) for e in recorder.exchanges]}; output: {str(hang.output)[-2000:]}")
    took = time.monotonic() - started
    wait_until(lambda: all(e.done or e.left for e in recorder.exchanges), 30, "each answer to end or its client to go")
    rounds, written = recorder.rounds(), tmp_path / "work" / FILE
    print(f"\n{name}: exit {status} in {took:.0f} s; {len(rounds)} requests {[readable(e) for e in rounds]}, "
          f"prompt tokens {[prompt_tokens(e) for e in rounds]}, calls {[called(e) for e in rounds]}; file "
          f"written: {written.exists()} {written.read_text()[:80] if written.exists() else ''!r}; "
          f"printed: {printed[-400:]!r}")
    verdicts = [verdict(e) for e in recorder.exchanges]
    tasks = task_rounds(recorder)
    assert tasks, (status, printed[-3000:])
    if name in TOO_LONG:
        assert_refused_as_too_long(name, tasks, status, printed)
        return
    assert {"call", "answer"} & {verdict(t) for t in tasks}, verdicts
    if status != 0:  # only after an error, or the agent's own time limit
        assert verdict(rounds[-1]) not in ("call", "answer"), (status, verdicts, printed[-3000:])


def readable(exchange: Exchange) -> str:
    try:
        return verdict(exchange)
    except AssertionError as bad:
        return f"INVALID {str(bad)[:300]}"


def prompt_tokens(exchange: Exchange) -> int | None:
    """The prompt's size in the answer's usage or error."""
    found = re.findall(rb'"(?:prompt_tokens|input_tokens)":(\d+)', exchange.response)
    return int(found[-1]) if found else None


def called(exchange: Exchange) -> list[str]:
    """The tools an answer called."""
    return [n.decode() for n in re.findall(rb'"name":"(\w+)"', exchange.response)]


def assert_refused_as_too_long(name: str, tasks: list[Exchange], status: int, printed: str) -> None:
    first = tasks[0].error()
    assert tasks[0].status == 400 and first["code"] == "context_length_exceeded", first
    assert first["context"] == CONTEXT and first["prompt_tokens"] > CONTEXT and first["counted"] is True, first
    assert f"{first['prompt_tokens']} tokens" in first["message"] and f"{CONTEXT} tokens" in first["message"]
    assert all(verdict(t) == "context_length_exceeded" for t in tasks)
    assert status != 0, printed[-3000:]
    shown = SHOWN.get(name, f"{first['prompt_tokens']} tokens")
    assert shown in printed and (name in SHOWN or f"{CONTEXT} tokens" in printed), printed[-3000:]
