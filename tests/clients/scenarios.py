"""The model behind the agent-framework tests: a responder for the fake upstream that reads the conversation.

A framework's tool loop needs an upstream that answers each turn for what it holds, not a queue of canned
answers: until a tool result is in the history the "model" calls `get_weather` (badly, per scenario); once a
result is there it answers in text that quotes the result verbatim, so a test that finds the tool's output in
the framework's final text proves the result went from the tool through the proxy to the model and back.

Scenarios (each streamed when the request asks for it):
- `malformed_text`: the call is written into content as Hermes `<tool_call>` text with Python-ish quotes and a
  trailing comma (the proxy mends it locally, one round).
- `malformed_args`: a native call whose arguments are broken JSON (mended locally).
- `missing_arg`: the first call lacks the required `city`; the proxy runs a correction round and the model then
  calls properly (a constrained round, `response_format` with a JSON schema, is answered with the bare JSON
  object its prompt asks for).
- `no_tools`: llama-server without `--jinja` (500 `tools param requires --jinja flag` whenever `tools` is sent);
  the proxy falls back to prompted mode, where the model answers in the `<tool_call>` format the prompt asks for.
- `surrender`: every call round lacks `city` (a different wrong argument each time): the proxy gives up with 422.
- `unknown_tool` (not in SCENARIOS: the agent tiers add it): the first call names a tool that does not exist
  (`weather_report`); the proxy's correction round lists the tools and the model then calls properly.

smolagents ends a run only through its own `final_answer` tool, pydantic-ai with a structured output type through
its `final_result` tool (`{"summary": ...}` in the tests): when the request offers one of them (natively or in the
proxy's system text) the final answer is a call to it instead of plain text, as a real model's is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sanctum_proxy.upstreams.lesson_checks import CHECK_TOOL
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, completion, content_chunks, llama_tool_chunks, native_call

SCENARIOS = ["malformed_text", "malformed_args", "missing_arg", "no_tools", "surrender"]
WORKING = [s for s in SCENARIOS if s != "surrender"]
CITY = "Paris"
ASK = "What is the weather in Paris? Use the get_weather tool."


def weather(city: str) -> str:
    """What every framework's `get_weather` tool returns: text the fake model can only know from the tool."""
    return f"{city}: sunny, 21 C, wind 7 km/h (station report 4711)"


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def tool_result(messages: list[dict[str, Any]]) -> str | None:
    """The newest tool result in the history, however the client (or prompted mode) wrote it down."""
    last = messages[-1] if messages else {}
    text = text_of(last.get("content"))
    if last.get("role") == "tool":
        return text
    if last.get("role") == "user":
        prompted = re.search(r"<tool_response[^>]*>\n?(.*?)\n?</tool_response>", text, re.S)
        if prompted:
            return prompted.group(1)
        if "Observation:" in text:  # smolagents writes tool results as user text
            return text.split("Observation:", 1)[1].strip()
    return None


def offers(body: dict[str, Any], name: str) -> bool:
    """Whether the request offers tool `name`: natively, or in the tool list of the proxy's system text."""
    if any(t.get("function", {}).get("name") == name for t in body.get("tools") or []):
        return True
    system = " ".join(text_of(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
    return f"- {name}:" in system


@dataclass
class Model:
    scenario: str
    call_rounds: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)  # the proxy's own tools requests, not the client's

    def __call__(self, body: dict[str, Any]) -> Step:
        if offers(body, CHECK_TOOL["function"]["name"]):  # answered as every tools request, kept apart
            self.checks.append(body)
            return Step(*LLAMA_NO_JINJA) if self.scenario == "no_tools" else text_step("ok", False)
        self.requests.append(body)
        stream = bool(body.get("stream"))
        schema = (body.get("response_format") or {}).get("json_schema") or {}
        constrained = schema.get("name") == "sanctum_answer"  # the proxy's own constrained round
        if self.scenario == "no_tools" and body.get("tools"):
            return Step(*LLAMA_NO_JINJA)
        prompted = not body.get("tools")
        result = tool_result(body.get("messages", []))
        if result is not None:
            answer = f"The weather tool said: {result}"
            if schema and not constrained:  # the client's structured output (a `summary` field in the tests)
                return self._text(json.dumps({"summary": answer}), stream)
            if offers(body, "final_result"):
                return self._call("final_result", json.dumps({"summary": answer}), prompted, stream, constrained)
            if offers(body, "final_answer"):
                return self._call("final_answer", json.dumps({"answer": answer}), prompted, stream, constrained)
            return self._text(answer, stream)
        if prompted and not offers(body, "get_weather"):
            return self._text("I have no tool for the weather.", stream)
        self.call_rounds += 1
        if self.scenario == "malformed_text":
            return self._text(f"Let me check. <tool_call>{{'name': 'get_weather', 'arguments': {{'city': '{CITY}',}}}}"
                              "</tool_call>", stream)
        arguments, name = json.dumps({"city": CITY}), "get_weather"
        if self.scenario == "unknown_tool" and self.call_rounds == 1:
            name = "weather_report"
        if self.scenario == "malformed_args":
            arguments = f"{{'city': '{CITY}',}}"
        elif self.scenario == "missing_arg" and self.call_rounds == 1:
            arguments = "{}"
        elif self.scenario == "surrender":
            arguments = json.dumps({f"place{self.call_rounds}": CITY})
        return self._call(name, arguments, prompted, stream, constrained)

    def streamed(self, stream: bool) -> bool:
        """Whether every request (the client's and the proxy's own rounds) was streamed as the client asked."""
        return bool(self.requests) and all(bool(r.get("stream")) == stream for r in self.requests)

    @staticmethod
    def _text(text: str, stream: bool) -> Step:
        return text_step(text, stream)

    def _call(self, name: str, arguments: str, prompted: bool, stream: bool, constrained: bool = False) -> Step:
        if prompted and not constrained:  # the format the proxy's prompt asks for
            return self._text(f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>', stream)
        return call_step(name, arguments, stream, constrained, f"call_{self.call_rounds}_{len(self.requests)}")


def text_step(text: str, stream: bool) -> Step:
    return Step(chunks=content_chunks(text, size=7)) if stream else Step(body=completion(text))


def call_step(name: str, arguments: str, stream: bool, constrained: bool, call_id: str) -> Step:
    """A model's call: native (streamed as llama.cpp streams it, or whole), or under the proxy's
    grammar-constrained round the one JSON object it asks for."""
    if constrained:
        return text_step(f'{{"name": "{name}", "arguments": {arguments}}}', stream)
    if stream:
        chunks = llama_tool_chunks(name, arguments)
        chunks[1]["choices"][0]["delta"]["tool_calls"][0]["id"] = call_id
        return Step(chunks=chunks)
    return Step(body=completion(None, [native_call(name, arguments, call_id)], "tool_calls"))
