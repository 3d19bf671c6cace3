"""The model behind the Claude Code tests: a responder for the fake upstream that reads Claude Code's conversation
(as the proxy translates it to chat) and fumbles its Write call per scenario, the way small models do.

Grounded in Claude Code 2.1.332's real traffic through the proxy (captured with the fake logging every request):
`claude -p` sends one streamed /v1/messages request per turn with 12 tools (Agent, Bash, Edit, ListAgents, Read,
ReportFindings, ScheduleWakeup, Skill, ToolSearch, Workflow, DeferredToolPlaceholder, Write), `system` as three
text blocks (the first its `x-anthropic-billing-header:` line), the task as a user message, then a `system`
message after it ("# Environment ... Primary working directory: <cwd>"), `thinking: {"type": "adaptive"}`,
`context_management`, `output_config: {"effort": "medium"}`, `metadata.user_id`, `max_tokens: 128000`. A tool
result comes back as a `tool_result` block (`is_error` for a refused or invalid call: Claude Code checks the input
against the tool's schema itself and answers "InputValidationError: ..." without running the tool).

Until Write has run the model calls it (badly, per scenario); after Write's result it answers in text that quotes
the result, so the CLI's printed answer proves the result went from the tool through the proxy to the model.

Scenarios (streamed, as Claude Code asks):
- `malformed_text`: the call written into content as `<tool_call>` text with Python quotes and a trailing comma.
- `malformed_args`: a native call whose arguments are broken JSON.
- `missing_arg`: the first call lacks `content`; right on the proxy's correction round.
- `unknown_tool`: the first call names `write_file`, which Claude Code does not offer; right on the correction.
- `surrender`: every call lacks `content` (the proxy's corrections do not help) until the model reads Claude Code's
  own validation error in a tool result; then it calls properly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.clients.scenarios import text_of
from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call

SCENARIOS = ["malformed_text", "malformed_args", "missing_arg", "unknown_tool", "surrender"]
FILE = "hello.txt"
TEXT = "hello from sanctum"
TASK = f"Create a file named {FILE} containing exactly: {TEXT}"


def workdir(messages: list[dict[str, Any]]) -> str:
    """The working directory Claude Code names in its environment system message."""
    for message in messages:
        found = re.search(r"Primary working directory: (\S+)", text_of(message.get("content")))
        if found:
            return found.group(1)
    raise AssertionError("no working directory in Claude Code's request")


@dataclass
class ClaudeCodeModel:
    scenario: str
    call_rounds: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    tool_errors: list[str] = field(default_factory=list)  # Claude Code's own error results the model read

    def __call__(self, body: dict[str, Any]) -> Step:
        self.requests.append(body)
        stream = bool(body.get("stream"))
        messages = body.get("messages", [])
        schema = (body.get("response_format") or {}).get("json_schema") or {}
        constrained = schema.get("name") == "sanctum_answer"  # the proxy's constrained correction round
        if not body.get("tools") and not constrained:  # an auxiliary request (a title, a summary): plain text
            return self._text("Hello file", stream)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            result = text_of(last.get("content"))
            if not result.startswith("Error"):
                return self._text(f"Done. The Write tool said: {result}", stream)
            self.tool_errors.append(result)
        path = f"{workdir(messages)}/{FILE}"
        self.call_rounds += 1
        name, arguments = "Write", json.dumps({"file_path": path, "content": TEXT})
        if self.scenario == "malformed_text":
            return self._text(f"I'll create it. <tool_call>{{'name': 'Write', 'arguments': {{'file_path': '{path}', "
                              f"'content': '{TEXT}',}}}}</tool_call>", stream)
        if self.scenario == "malformed_args":
            arguments = f"{{'file_path': '{path}', 'content': '{TEXT}',}}"
        elif self.scenario == "missing_arg" and self.call_rounds == 1:
            arguments = json.dumps({"file_path": path})
        elif self.scenario == "unknown_tool" and self.call_rounds == 1:
            name = "write_file"
        elif self.scenario == "surrender" and not self.tool_errors:
            arguments = json.dumps({"file_path": path})
        return self._call(name, arguments, stream, constrained)

    @staticmethod
    def _text(text: str, stream: bool) -> Step:
        return Step(chunks=content_chunks(text, size=7)) if stream else Step(body=completion(text))

    def _call(self, name: str, arguments: str, stream: bool, constrained: bool) -> Step:
        if constrained:  # the answer object the proxy's correction round asks for
            return self._text(f'{{"name": "{name}", "arguments": {arguments}}}', stream)
        call_id = f"call_{self.call_rounds}_{len(self.requests)}"
        if stream:
            chunks = llama_tool_chunks(name, arguments)
            chunks[1]["choices"][0]["delta"]["tool_calls"][0]["id"] = call_id
            return Step(chunks=chunks)
        return Step(body=completion(None, [native_call(name, arguments, call_id)], "tool_calls"))
