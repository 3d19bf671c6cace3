"""Codex CLI (npm @openai/codex, pinned in tests/agents/codex) runs `codex exec` through the proxy in its default
configuration (Responses API, its namespace and hosted web_search tools on), the fake upstream answering as a
fumbling model (tests/clients/shell_scenarios.py). Each run checks the shell command really ran (the file it
writes) and the turn ended with the model's answer."""

from __future__ import annotations

import pytest

from tests.clients.codex_cli import need_codex, run_codex
from tests.clients.shell_scenarios import COMMAND, FILE, SCENARIOS, TASK, TOKEN, ShellModel

need_codex()


@pytest.fixture
def codex_model(fake, make_proxy):
    def start(scenario: str, **flags):
        model = ShellModel(scenario)
        fake[0].responder = model
        return make_proxy(**flags) + "/v1", model

    return start


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_codex_runs_the_command_and_finishes_the_task(codex_model, tmp_path, scenario):
    base_url, model = codex_model(scenario)
    run = run_codex(base_url, TASK, tmp_path)
    assert run.returncode == 0, (run.events, run.stderr[-2000:])
    assert (run.workdir / FILE).read_text() == TOKEN  # the command ran, with the arguments the model meant
    assert [c["exit_code"] for c in run.commands() if COMMAND in c["command"]] == [0]
    assert run.final_text().startswith(f"Done: {FILE} written.")
    assert any(e.get("type") == "turn.completed" for e in run.events)
    assert all(r.get("stream") is True for r in model.requests)  # Codex streams; so do the proxy's rounds


def test_codex_routes_a_namespaced_call_to_its_namespace(codex_model, tmp_path):
    # Answered with `name` and `namespace`, Codex runs multi_agent_v1's close_agent (which refuses the made-up
    # agent id); a call it could not route would come back as "unsupported call: multi_agent_v1__close_agent".
    base_url, model = codex_model("namespaced")
    run = run_codex(base_url, TASK, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "no-such-agent" in model.results[0] and "unsupported call" not in model.results[0]
    assert (run.workdir / FILE).read_text() == TOKEN


def test_codex_request_reaches_the_upstream_as_a_plain_chat_request(codex_model, tmp_path):
    base_url, model = codex_model("malformed_args")
    run_codex(base_url, TASK, tmp_path)
    first = model.requests[0]
    offered = model.offered()
    assert "exec_command" in offered and "multi_agent_v1__spawn_agent" in offered  # the namespace, flat
    assert len(offered) == 12 and "web_search" not in str(first["tools"])  # 7 functions, 5 in the namespace
    roles = [m["role"] for m in first["messages"]]
    assert roles[0] == "system" and roles.count("system") == 1 and "developer" not in roles
    assert "Codex" in first["messages"][0]["content"]  # Codex's two developer messages, merged
    assert not {"client_metadata", "prompt_cache_key", "include", "store", "reasoning"} & set(first)


def test_codex_after_a_surrender_retries_then_fails_the_turn(codex_model, tmp_path):
    # With responses_on_surrender = "error" the stream ends with `error` and `response.failed`: Codex reads that as
    # a dropped stream, sends the same request again (stream_max_retries, 5 by default), then fails the turn. The
    # surrender memo gives each resend one round.
    base_url, model = codex_model("surrender", responses_on_surrender="error")
    run = run_codex(base_url, TASK, tmp_path)
    assert run.returncode == 1
    failed = [e for e in run.events if e.get("type") == "turn.failed"]
    assert failed and "could not be repaired" in failed[0]["error"]["message"]
    assert not (run.workdir / FILE).exists()
    first = model.requests[0]["messages"]
    attempts = sum(1 for r in model.requests if r["messages"] == first)  # Codex's own request, not a correction
    assert attempts == 6 and len(model.requests) == 3 + 5  # the first attempt's 3 rounds, then 1 per resend


def test_codex_after_a_surrender_gets_the_last_call_and_its_own_error_keeps_the_session_going(codex_model, tmp_path):
    # The default on /v1/responses (responses_on_surrender = "last_call"): after the last repair round Codex gets the
    # model's last call as it made it; Codex validates exec_command's arguments itself, hands the model its own
    # error as the tool's output, and the model, reading it, calls properly: the command runs, the turn ends.
    base_url, model = codex_model("surrender")
    run = run_codex(base_url, TASK, tmp_path)
    assert run.returncode == 0, (run.events, run.stderr[-2000:])
    assert len(model.results) == 2 and "cmd" in model.results[0]  # Codex's own words about the missing `cmd`
    assert (run.workdir / FILE).read_text() == TOKEN
    assert run.final_text().startswith(f"Done: {FILE} written.")
