"""codecs/minimax.py on its own: MiniMax-M2's `<minimax:tool_call>` with `<invoke>` and `<parameter>` tags (pi
issue 368, verbatim), values as written (typed later by the schema), and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import minimax
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"bash", "get_weather"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in minimax.find(text, NAMES) for c in f.candidates]


def test_two_invokes_in_one_block_are_read() -> None:
    text = ('<minimax:tool_call>\n<invoke name="bash">\n<parameter name="command">mb --help</parameter>\n</invoke>\n'
            '<invoke name="bash">\n<parameter name="command">cm --help</parameter>\n</invoke>\n</minimax:tool_call>')
    assert calls(text) == [("bash", {"command": "mb --help"}), ("bash", {"command": "cm --help"})]


def test_render_call_is_read_back_as_strings() -> None:
    assert calls(minimax.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": "3"})]


def test_prose_is_no_call() -> None:
    assert minimax.find('Use <invoke name="bash"> to run it.', NAMES) == []


def test_values_keep_their_own_whitespace_and_lose_only_the_layout() -> None:
    """MiniMax-M2's template writes `<parameter name="k">v</parameter>` inline: an inline value's trailing newline
    is its own (a code edit's old text); a value set on its own lines loses those newlines and the closer's indent."""
    inline = ('<minimax:tool_call>\n<invoke name="bash">\n<parameter name="command">    return x\n</parameter>\n'
              '</invoke>\n</minimax:tool_call>')
    assert calls(inline) == [("bash", {"command": "    return x\n"})]
    block = ('<minimax:tool_call>\n<invoke name="bash">\n  <parameter name="command">\n  ls -la\n  </parameter>\n'
             '</invoke>\n</minimax:tool_call>')
    assert calls(block) == [("bash", {"command": "ls -la"})]
