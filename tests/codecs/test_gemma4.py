"""codecs/gemma4.py on its own: Gemma 4's `<|tool_call>call:NAME{...}<tool_call|>` with its `<|"|>` string quotes
(oMLX issue 593 and mlx-lm PR 1105, verbatim), and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import gemma4
from sanctum_proxy.core.shapes import JSONValue
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

NAMES = frozenset({"bash", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in gemma4.find(text, NAMES) for c in f.candidates]


def test_a_call_with_quote_tokens_is_read() -> None:
    assert calls('<|tool_call>call:bash{command:<|"|>ls -la<|"|>}<tool_call|>') == [("bash", {"command": "ls -la"})]


def test_two_calls_are_read_in_order() -> None:
    text = ('<|tool_call>call:get_weather{location:<|"|>Paris<|"|>}<tool_call|>'
            '<|tool_call>call:bash{command:<|"|>date<|"|>}<tool_call|>')
    assert calls(text) == [("get_weather", {"location": "Paris"}), ("bash", {"command": "date"})]


def test_render_call_is_read_back() -> None:
    arguments: JSONValue = {"city": "Paris", "days": 3, "hourly": False, "tags": ["a", "b"]}
    assert calls(gemma4.render_call("get_weather", arguments)) == [("get_weather", arguments)]


def test_prose_is_no_call() -> None:
    assert calls("I will call bash to list the files.") == []


def test_positional_values_beyond_the_tools_properties_are_asked_about() -> None:
    """ollama/ollama#18275's BEGIN_ARG form with one value more than `bash` has properties: tier 2, not a guess."""
    text = "<|tool_call>call:bash:\nBEGIN_ARG:\nls\nEND_ARG\nBEGIN_ARG:\n-la\nEND_ARG\n<tool_call|>"
    assert calls(text) == [("bash", '["ls", "-la"]')]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
    out = assess({"role": "assistant", "content": text}, Toolbox.from_tools(tools))
    assert not out.calls and out.problems and out.content is None
