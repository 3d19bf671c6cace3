"""The model behind the fake Ollama in the client tier: a responder that reads the conversation.

Until a tool result is in the history it calls `get_weather` for Paris, fumbled per scenario the way small
models behind Ollama fumble; once a result is there it answers in text quoting the result, so a client's final
text proves the result went through the proxy and back. Asked without tools (the proxy's prompted rounds, the
tools in its system text) it writes the `<tool_call>` the prompt asks for; under a `format` schema (the proxy's
constrained round) the bare JSON object.

Scenarios (the model the test should ask is in MODEL_FOR):
- `native`: a well-formed native call.
- `content_json`, `content_fenced`, `content_hermes`: the call written into content as bare JSON, fenced JSON
  or Hermes `<tool_call>` XML (what Ollama's tool parser leaves when the template's tag differs).
- `broken_args`: the call in content with Python quotes and a trailing comma (Ollama's parser could not read
  it, so it handed the text back as content).
- `swallowed`: the first call round answers nothing at all (Ollama cut the call away); later rounds call.
- `parser_500`: every native round with tools fails in Ollama's own parser (qwen3's 500 before any output).
- `parser_midstream`: the same failure after some content went out (harmony's error as the in-band line;
  not streamed: the 500).
- `no_tools`: a model without the tools capability (gemma:2b): Ollama refuses `tools` with its 400.
- `think`: a thinking model with `think` on: thinking streamed before the native call and before the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.clients.scenarios import ASK, CITY, offers, tool_result, weather
from tests.fakes.ollama import (
    HARMONY_PARSE_ERROR,
    QWEN3_PARSE_ERROR,
    FakeOllama,
    Reply,
    call,
    fail,
    fail_midstream,
    say,
)

__all__ = ["ASK", "CITY", "MODEL_FOR", "SCENARIOS", "OllamaModel", "not_kept", "weather"]

SCENARIOS = ["native", "content_json", "content_fenced", "content_hermes", "broken_args", "swallowed",
             "parser_500", "parser_midstream", "no_tools", "think"]
MODEL_FOR = {s: "llama3.2:1b" for s in SCENARIOS} | {"no_tools": "gemma:2b", "think": "qwen3:0.6b",
                                                    "parser_500": "qwen3:0.6b"}
THOUGHT = "The user wants the weather in Paris, so I should call get_weather."


def _call_json(name: str = "get_weather", city: str = CITY) -> str:
    return json.dumps({"name": name, "arguments": {"city": city}})


@dataclass
class OllamaModel:
    scenario: str
    call_rounds: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def model(self) -> str:
        return MODEL_FOR[self.scenario]

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.requests.append(body)
        thinking = THOUGHT if self.scenario == "think" and body.get("think") not in (None, False) else ""
        constrained = isinstance(body.get("format"), dict)
        prompted = not body.get("tools")
        result = tool_result(body.get("messages") or [])
        if result is not None:
            answer = f"The weather tool said: {result}"
            return say(json.dumps({"content": answer}) if constrained else answer,
                       "I have the result." if thinking else "")
        if constrained:
            return say(_call_json())
        if prompted:
            if offers(body, "get_weather"):
                return say(f"<tool_call>{_call_json()}</tool_call>")
            return say("I have no tool for the weather.")
        self.call_rounds += 1
        return self._fumble(thinking)

    def _fumble(self, thinking: str) -> Reply:
        scenario, first = self.scenario, self.call_rounds == 1
        if scenario == "content_json":
            return say(_call_json())
        if scenario == "content_fenced":
            return say(f"```json\n{_call_json()}\n```")
        if scenario == "content_hermes":
            return say(f"<tool_call>\n{_call_json()}\n</tool_call>")
        if scenario == "broken_args":
            return say(f"<tool_call>{{'name': 'get_weather', 'arguments': {{'city': '{CITY}',}}}}</tool_call>")
        if scenario == "swallowed" and first:
            return say("")
        if scenario == "parser_500":
            return fail(500, QWEN3_PARSE_ERROR)
        if scenario == "parser_midstream":
            return fail_midstream(HARMONY_PARSE_ERROR)
        return call("get_weather", {"city": CITY}, thinking, call_id=f"call_{self.call_rounds:08d}")



def not_kept(fake: FakeOllama, model: OllamaModel, **sent: Any) -> list[str]:
    """What did not reach Ollama's /api/chat as the client sent it, round by round: each round the model
    answered must be a native request carrying every field in `sent` (options, keep_alive, think...) unchanged."""
    problems = [] if model.requests else ["no round reached the model"]
    if len(fake.requests) < len(model.requests):
        problems.append(f"{len(model.requests) - len(fake.requests)} of {len(model.requests)} rounds went to /v1, "
                        "not /api/chat")
    for i, body in enumerate(fake.requests):
        problems += [f"round {i + 1}: {key} {body.get(key)!r}, sent {value!r}" for key, value in sent.items()
                     if body.get(key) != value]
    return problems

