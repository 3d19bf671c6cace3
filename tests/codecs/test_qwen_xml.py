"""codecs/qwen_xml.py on its own: Qwen3-Coder's `<function=NAME><parameter=KEY>` body, here without its opening
`<tool_call>` after prose (Ollama issue 16686, verbatim), values as written (typed later by the schema), and
`render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import qwen_xml
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"Glob", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in qwen_xml.find(text, NAMES) for c in f.candidates]


def test_a_call_without_its_opening_tag_is_read() -> None:
    text = ("I'll use the Glob tool to list all markdown files in the current directory.\n\n"
            "<function=Glob>\n<parameter=pattern>\n*.md\n</parameter>\n</function>\n</tool_call>")
    assert calls(text) == [("Glob", {"pattern": "*.md"})]


def test_render_call_is_read_back_as_strings() -> None:
    assert calls(qwen_xml.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": "3"})]


def test_prose_is_no_call() -> None:
    assert qwen_xml.find("The function Glob takes a pattern parameter.", NAMES) == []
