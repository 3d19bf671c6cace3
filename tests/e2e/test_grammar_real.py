"""grammar.gbnf against the real llama-server: it parses every grammar made from BFCL's tool schemas in each
format that has one, and a constrained prompted round comes back as a valid call in the prompt's format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.grammar import GRAMMAR_FORMATS, gbnf
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.upstreams.embedded import LlamaServer

TOOLS = Path(__file__).resolve().parents[1] / "data" / "bfcl_tools.json"  # a BFCL sample: its SOURCE.md says


def tool_sets() -> list[list[dict[str, Any]]]:
    return [entry["tools"] for entry in orjson.loads(TOOLS.read_bytes())]


def post(server: LlamaServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300)


@pytest.mark.parametrize("fmt", sorted(GRAMMAR_FORMATS))
def test_llama_server_parses_every_grammar(llama_jinja: LlamaServer, fmt: str) -> None:
    refused = []
    for tools in tool_sets():
        for text, parallel in ((False, False), (True, True)):
            grammar = gbnf(Toolbox.from_tools(tools), fmt, text=text, parallel=parallel)
            assert grammar is not None
            reply = post(llama_jinja, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                       "grammar": grammar})
            if reply.status_code != 200:
                refused.append((tools[0]["function"]["name"], reply.text[:200]))
    assert not refused


def test_a_constrained_prompted_round_is_a_valid_call(llama_jinja: LlamaServer) -> None:
    tools = [{"type": "function", "function": {
        "name": "calculate_triangle_area", "description": "Area of a triangle.",
        "parameters": {"type": "object", "properties": {"base": {"type": "integer"}, "height": {"type": "integer"},
                                                        "unit": {"type": "string"}},
                       "required": ["base", "height"]}}}]
    book = Toolbox.from_tools(tools)
    question = {"messages": [{"role": "user", "content": "Area of a triangle with base 10 and height 5?"}]}
    body = prompted.to_prompted(question, book, "hermes")
    grammar = gbnf(book, "hermes", text=False, parallel=False)
    reply = post(llama_jinja, {**body, "max_tokens": 96, "temperature": 0, "grammar": grammar})
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assert message["content"].startswith("<tool_call>\n{")
    assessment = assess(message, book, finish_reason="stop", asked_format="hermes")
    assert not assessment.problems and [c.name for c in assessment.calls] == ["calculate_triangle_area"]


def test_optional_properties_chained_parse_and_hold_a_call(llama_jinja: LlamaServer) -> None:
    """Objects without required properties: a chain of rules, one per optional property (linear; issue 32). The
    3,000-property grammar parses, and a constrained round with three optional ones comes back a valid call."""
    wide = Toolbox.from_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {f"option_number_{i}": {"type": "string"} for i in range(3000)}}}}])
    grammar = gbnf(wide, "hermes", text=False, parallel=False)
    assert grammar is not None and len(grammar) < 1024 * 1024
    reply = post(llama_jinja, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "grammar": grammar})
    assert reply.status_code == 200, reply.text[:300]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}}}}}]
    book = Toolbox.from_tools(tools)
    body = prompted.to_prompted({"messages": [{"role": "user", "content": "Weather in Paris for 2 days?"}]},
                                book, "hermes")
    reply = post(llama_jinja, {**body, "max_tokens": 96, "temperature": 0,
                               "grammar": gbnf(book, "hermes", text=False, parallel=False)})
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assessment = assess(message, book, finish_reason="stop", asked_format="hermes")
    assert not assessment.problems and [c.name for c in assessment.calls] == ["get_weather"], message
