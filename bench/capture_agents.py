"""Captures what Claude Code and Codex CLI really send: each agent runs one task through the proxy in front of the
scripted fake upstream; every body that reaches the proxy and every body the upstream gets is kept, paths rewritten.

    python bench/capture_agents.py            # writes tests/data/agent_requests/{claude-code,codex}.json

Needs the pinned CLIs (npm ci in tests/agents/claude-code and tests/agents/codex). Each file holds
`{"agent", "endpoint", "client": [bodies at the proxy], "upstream": [chat bodies at the upstream]}` per turn.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sanctum_proxy.app import create_app  # noqa: E402
from sanctum_proxy.config import load_settings  # noqa: E402
from tests.conftest import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

OUT = ROOT / "tests" / "data" / "agent_requests"


class Recorder:
    """ASGI middleware keeping each POST body the proxy receives, with its path."""

    def __init__(self, app: Any) -> None:
        self.app, self.bodies = app, []  # type: ignore[var-annotated]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def keep() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.bodies.append((scope["path"], b"".join(chunks)))
            return message

        await self.app(scope, keep, send)


def scrub(text: str, paths: list[str]) -> str:
    """Home and temporary directories rewritten to fixed stand-ins; ids and dates left as they are."""
    for path in sorted(paths, key=len, reverse=True):
        text = text.replace(path, "/home/user/project" if "work" in path else "/home/user")
    text = re.sub(r"/tmp/[A-Za-z0-9_.-]+", "/tmp/scratch", text)
    text = re.sub(r"-tmp-[A-Za-z0-9_-]+", "-tmp-scratch", text)  # Claude Code's project key of a temp cwd
    home = re.escape(os.path.expanduser("~"))
    return re.sub(home + r"(?=[/\\\s`'\"]|$)", "/home/user", text)  # a path, not the tag </root>


def capture(agent: str, responder: Any, run: Any) -> dict[str, Any]:
    fake = FakeUpstream()
    fake.responder = responder
    with ServerThread(fake.app()) as upstream:
        recorder = Recorder(create_app(load_settings({"upstream": upstream.url + "/v1", "traces_path": ":memory:"})))
        with ServerThread(recorder) as proxy, tempfile.TemporaryDirectory(prefix=f"{agent}-") as tmp:
            paths = run(proxy.url, Path(tmp))
    client = [(path, json.loads(body)) for path, body in recorder.bodies if path.startswith("/v1/")]
    text = json.dumps({"agent": agent, "endpoint": client[0][0] if client else None,
                       "client": [body for _, body in client], "upstream": fake.requests}, indent=1)
    return json.loads(scrub(text, paths))  # type: ignore[no-any-return]


def claude(url: str, tmp: Path) -> list[str]:
    from tests.clients.claude_code_cli import run_claude

    work = tmp / "work"
    work.mkdir()
    done = run_claude(url, str(work))
    print("claude-code:", done.returncode, done.stdout[-300:], file=sys.stderr)
    return [str(work), str(tmp), os.path.realpath(tmp)]


def codex(url: str, tmp: Path) -> list[str]:
    from tests.clients.codex_cli import run_codex
    from tests.clients.shell_scenarios import TASK

    done = run_codex(url + "/v1", TASK, tmp)
    print("codex:", done.returncode, done.final_text()[-300:], file=sys.stderr)
    return [str(tmp / "work"), str(tmp), os.path.realpath(tmp)]


def main() -> int:
    from tests.clients.claude_code_model import ClaudeCodeModel
    from tests.clients.shell_scenarios import ShellModel

    OUT.mkdir(parents=True, exist_ok=True)
    for agent, responder, run in (("claude-code", ClaudeCodeModel("malformed_args"), claude),
                                  ("codex", ShellModel("malformed_args"), codex)):
        record = capture(agent, responder, run)
        (OUT / f"{agent}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(agent, len(record["client"]), "client bodies,", len(record["upstream"]), "upstream bodies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
