"""The model behind the coding-agent tests (Codex CLI): a responder for the fake upstream that runs one shell
command through the agent's own shell tool, fumbling the call per scenario, then says it is done.

Grounded in Codex CLI 0.171's real requests (captured; tests/data/codex_0.171_request.json, trimmed): `stream:
true`, its instructions as two `developer` input messages, 7 function tools (`exec_command` with a required
`cmd`, ...), a `multi_agent_v1` namespace of 5 functions and a hosted `web_search` tool. Until a tool result is in the
history the "model" calls the shell tool; once one is there it answers in text that quotes the result. The
test then checks the command's effect on disk (the file the command writes), so a pass proves that the call
reached the agent with the right arguments, ran, and that the agent's turn ended with the answer.

Scenarios (streamed: Codex always streams):
- `malformed_text`: the call written into content as Hermes `<tool_call>` text, Python quotes, trailing comma.
- `malformed_args`: a native call whose arguments are broken JSON (mended locally).
- `missing_arg`: the first call lacks the required argument; right on the correction round.
- `unknown_tool`: the first call names a tool that does not exist (`run_shell`); right on the correction round.
- `namespaced`: first a call of a namespaced function (`multi_agent_v1__close_agent`, an agent that does not
  exist: the agent answers with an error result, proving it routed the call to its namespace), then the shell.
- `surrender`: every call lacks the required argument (a different wrong one each time), until the agent's own
  error for that call comes back as a tool result; then the model calls properly (with `on_surrender = "error"`
  no result ever comes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.clients.scenarios import text_of, tool_result
from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call

SCENARIOS = ["malformed_text", "malformed_args", "missing_arg", "unknown_tool", "namespaced"]
TOKEN = "sanctum-4711"
FILE = "result.txt"
COMMAND = f"printf {TOKEN} > {FILE}"
TASK = f"Create the file {FILE} containing {TOKEN}: run `{COMMAND}` with your shell tool, then say done."


@dataclass
class ShellModel:
    scenario: str
    tool: str = "exec_command"  # Codex's shell tool and its required argument
    argument: str = "cmd"
    call_rounds: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # every tool result the agent sent back

    def __call__(self, body: dict[str, Any]) -> Step:
        self.requests.append(body)
        stream = bool(body.get("stream"))
        schema = (body.get("response_format") or {}).get("json_schema") or {}
        constrained = schema.get("name") == "sanctum_answer"  # the proxy's own constrained round
        messages = body.get("messages", [])
        result = tool_result(messages)
        if result is not None and not constrained:
            self.results.append(result)
            if self.scenario in ("namespaced", "surrender") and len(self.results) == 1:
                return self._call(self.tool, json.dumps({self.argument: COMMAND}), stream, constrained)
            return self._text(f"Done: {FILE} written. The tool said: {result[:200]}", stream)
        self.call_rounds += 1
        name, arguments = self.tool, json.dumps({self.argument: COMMAND})
        if self.scenario == "malformed_text":
            return self._text(f"I will run it. <tool_call>{{'name': '{name}', 'arguments': "
                              f"{{'{self.argument}': '{COMMAND}',}}}}</tool_call>", stream)
        if self.scenario == "malformed_args":
            arguments = f"{{'{self.argument}': '{COMMAND}',}}"
        elif self.scenario == "missing_arg" and self.call_rounds == 1:
            arguments = json.dumps({"workdir": "."})
        elif self.scenario == "unknown_tool" and self.call_rounds == 1:
            name = "run_shell"
        elif self.scenario == "namespaced" and not self.results:
            name, arguments = "multi_agent_v1__close_agent", json.dumps({"target": "no-such-agent"})
        elif self.scenario == "surrender":
            arguments = json.dumps({f"command{self.call_rounds}": COMMAND})
        return self._call(name, arguments, stream, constrained)

    def offered(self) -> list[str]:
        """The tool names of the agent's first request, as the upstream saw them."""
        return [t["function"]["name"] for t in self.requests[0].get("tools") or []]

    def system_texts(self) -> list[str]:
        return [text_of(m.get("content")) for m in self.requests[0].get("messages", [])
                if m.get("role") in ("system", "developer")]

    @staticmethod
    def _text(text: str, stream: bool) -> Step:
        return Step(chunks=content_chunks(text, size=7)) if stream else Step(body=completion(text))

    def _call(self, name: str, arguments: str, stream: bool, constrained: bool) -> Step:
        if constrained:  # the proxy's grammar-constrained round: one JSON object, nothing else
            return self._text(f'{{"name": "{name}", "arguments": {arguments}}}', stream)
        call_id = f"call_{self.call_rounds}_{len(self.requests)}"
        if stream:
            chunks = llama_tool_chunks(name, arguments)
            chunks[1]["choices"][0]["delta"]["tool_calls"][0]["id"] = call_id
            return Step(chunks=chunks)
        return Step(body=completion(None, [native_call(name, arguments, call_id)], "tool_calls"))
