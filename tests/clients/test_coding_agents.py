"""The coding agents people drive local models with (tests/clients/coding_agents.py: opencode, Qwen Code,
Continue's `cn`, goose, llm), each headless in its default configuration through the proxy's chat completions in
front of the scripted fake upstream whose model fumbles the write call (tests/clients/write_scenarios.py). Each
scenario must end with the file written by the agent's own write tool, the agent's exit status 0 and the model's
final answer printed. The surrender scenario runs the default `on_surrender = "last_call"`: the agent's own
validation error reaches the model, which then calls properly. An agent that is not installed skips."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.coding_agents import AGENTS, Agent
from tests.clients.write_scenarios import FILE, SCENARIOS, TASK, TEXT, WriteModel

INSTALLED = {name: agent.installed() for name, agent in AGENTS.items()}


def need(agent: Agent) -> None:
    if not INSTALLED[agent.name]:
        pytest.skip(f"{agent.name} {agent.version} is not installed ({agent.binary}): {agent.install}")


def run(agent: Agent, scenario: str, fake, make_proxy, tmp_path: Path, **settings):  # type: ignore[no-untyped-def]
    need(agent)
    model = WriteModel(scenario, agent, str(tmp_path / "work" / FILE))
    fake[0].responder = model
    done = agent.run(make_proxy(**settings) + "/v1", TASK, tmp_path)
    return model, done


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", list(AGENTS))
def test_agent_writes_the_file_and_finishes_through_the_proxy(name, scenario, fake, make_proxy, tmp_path):
    agent = AGENTS[name]
    model, done = run(agent, scenario, fake, make_proxy, tmp_path)
    written = tmp_path / "work" / FILE
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert written.exists() and written.read_text().rstrip("\n") == TEXT, (model.results, done.stdout[-2000:])
    assert "Done. The write tool said:" in done.stdout, done.stdout[-2000:]
    assert all(r.get("stream") for r in model.requests if r.get("tools"))  # the agents stream; so do the rounds
    if scenario == "surrender":  # the model learnt from the agent's own validation error, not from the proxy
        assert len(model.results) == 2 and agent.content_key in model.results[0], model.results
    else:
        assert len(model.results) == 1, model.results


@pytest.mark.parametrize("name", list(AGENTS))
def test_agent_after_an_error_surrender_ends_without_the_file(name, fake, make_proxy, tmp_path):
    # on_surrender = "error": what these agents met before the default changed. None gets the file written; four
    # exit 1, goose sends its request again (3 retries), and exits 0; each resend gets one round (the surrender memo).
    agent = AGENTS[name]
    model, done = run(agent, "surrender", fake, make_proxy, tmp_path, on_surrender="error")
    assert not (tmp_path / "work" / FILE).exists()
    assert model.results == []
    rounds = [r for r in model.requests if r.get("tools")]
    if name == "goose":
        assert done.returncode == 0 and len(rounds) == 2 + 3  # 2 rounds (a repeat ends them early), then 1 a resend
    else:
        assert done.returncode != 0 and len(rounds) == 2
