"""The model behind the coding-agent tier (tests/clients/test_coding_agents.py): a responder for the fake upstream
that writes one file through the agent's own write tool, fumbling the call per scenario, then says it is done.

Grounded in each agent's real first request (tests/data/agent_requests/<agent>.json): streamed chat completions
with `stream_options.include_usage`, the write tool (opencode `write` {filePath, content}, Qwen Code `write_file`
{file_path, content}, Continue `Write` {filepath, content}, goose `write` {path, content}, llm-tools-patch
`Patch_write` {file_path, content}), side requests without tools (a title) or with a memory subagent's system
prompt (Qwen Code after a text turn). Until the write tool's result is in the history the "model" calls it;
after a result it answers in text quoting it, so the agent's printed answer proves the result came back.

Scenarios (the agents stream, so does every round):
- `malformed_text`: the call written into content as Hermes `<tool_call>` text, Python quotes, trailing comma.
- `malformed_args`: a native call whose arguments are broken JSON (Python quotes, trailing comma).
- `missing_arg`: the first call lacks the content; right on the proxy's correction round.
- `unknown_tool`: the first call names `create_file`, which no agent offers; right on the correction round.
- `surrender`: every call lacks the content (the proxy's corrections do not help) until the model reads the
  agent's own validation error in a tool result; then it calls properly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.clients.coding_agents import Agent
from tests.clients.scenarios import call_step, text_of, text_step
from tests.fakes.upstream import Step

SCENARIOS = ["malformed_text", "malformed_args", "missing_arg", "unknown_tool", "surrender"]
FILE = "hello.txt"
TEXT = "hello from sanctum"
TASK = f"Create a file named {FILE} in the current directory containing exactly: {TEXT}"
SIDE = ("memory extraction", "Generate a short title", "title for")  # system prompts of agents' side requests


@dataclass
class WriteModel:
    scenario: str
    agent: Agent
    path: str  # the file's absolute path (every agent accepts one; Qwen Code requires it)
    call_rounds: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # the write tool's results the model read

    def __call__(self, body: dict[str, Any]) -> Step:
        self.requests.append(body)
        stream = bool(body.get("stream"))
        messages = body.get("messages", [])
        schema = (body.get("response_format") or {}).get("json_schema") or {}
        constrained = schema.get("name") == "sanctum_answer"  # the proxy's constrained correction round
        if not constrained and (not self.offered(body) or self.side(messages)):
            return text_step("Hello file", stream)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and not constrained:
            self.results.append(text_of(last.get("content")))
            if self.scenario != "surrender" or len(self.results) > 1:
                return text_step(f"Done. The write tool said: {self.results[-1][:200]}", stream)
        self.call_rounds += 1
        a = self.agent
        name, arguments = a.tool, json.dumps({a.path_key: self.path, a.content_key: TEXT})
        python = f"{{'{a.path_key}': '{self.path}', '{a.content_key}': '{TEXT}',}}"
        if self.scenario == "malformed_text":
            return text_step(f"I'll create it. <tool_call>{{'name': '{name}', 'arguments': {python}}}</tool_call>",
                             stream)
        if self.scenario == "malformed_args":
            arguments = python
        elif self.scenario == "missing_arg" and self.call_rounds == 1:
            arguments = json.dumps({a.path_key: self.path})
        elif self.scenario == "unknown_tool" and self.call_rounds == 1:
            name = "create_file"
        elif self.scenario == "surrender" and not self.results:
            arguments = json.dumps({a.path_key: self.path})
        return call_step(name, arguments, stream, constrained, f"call_{self.call_rounds}_{len(self.requests)}")

    def offered(self, body: dict[str, Any]) -> bool:
        return any((t.get("function") or {}).get("name") == self.agent.tool for t in body.get("tools") or [])

    @staticmethod
    def side(messages: list[dict[str, Any]]) -> bool:
        """A side request of the agent's (a memory subagent, a title) rather than its task."""
        system = text_of(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
        return any(s in system[:300] for s in SIDE)
