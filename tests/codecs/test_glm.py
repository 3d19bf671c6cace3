"""codecs/glm.py on its own: GLM-4.5's `<tool_call>NAME<arg_key>..</arg_key><arg_value>..</arg_value>` left in
content (ik_llama.cpp discussion 753, verbatim), values as written (typed later by the schema), and
`render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import glm
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"ls", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in glm.find(text, NAMES) for c in f.candidates]


def test_a_call_after_prose_is_read_and_located() -> None:
    prose = ("Let me search for configuration files in the backend directory to help locate this information: ")
    text = prose + "<tool_call>ls <arg_key>dirPath</arg_key> <arg_value>backend</arg_value> </tool_call>"
    assert calls(text) == [("ls", {"dirPath": "backend"})]
    (found,) = glm.find(text, NAMES)
    assert (found.start, found.end) == (len(prose), len(text))


def test_render_call_is_read_back_as_strings() -> None:
    assert calls(glm.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": "3"})]


def test_a_hermes_call_is_not_glm() -> None:
    assert calls('<tool_call>\n{"name": "ls", "arguments": {"dirPath": "backend"}}\n</tool_call>') == []
