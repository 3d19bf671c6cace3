"""codecs/seed.py on its own: Seed-OSS's `<seed:tool_call>` (vLLM's test_seed_oss_tool_parser.py, verbatim), a
call written inside `<seed:think>` is reasoning, and `render_call` read back."""

from __future__ import annotations

from sanctum_proxy.codecs import seed
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather"})
CALL = ("<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n</function>\n"
        "</seed:tool_call>")


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in seed.find(text, NAMES) for c in f.candidates]


def test_a_call_is_read() -> None:
    assert calls(CALL) == [("get_weather", {"location": "Barcelona, Spain"})]


def test_a_call_inside_thinking_is_reasoning() -> None:
    thinking = f"Maybe {CALL.replace('Barcelona, Spain', 'Madrid')} would do."
    found = seed.find(f"<seed:think>{thinking}</seed:think>{CALL}", NAMES)
    assert [(c.name, c.arguments) for f in found for c in f.candidates] == [
        ("get_weather", {"location": "Barcelona, Spain"})]
    assert [f.reasoning for f in found if f.reasoning] == [thinking]


def test_render_call_is_read_back_as_strings() -> None:
    assert calls(seed.render_call("get_weather", {"city": "Paris", "days": 3})) == [
        ("get_weather", {"city": "Paris", "days": "3"})]


def test_an_inline_value_keeps_its_own_trailing_newline() -> None:
    """Seed-OSS writes `<parameter=k>v</parameter>` inline (vLLM's seed_oss tests): a code edit's old text keeps
    the newline it ends with; the template's own-line layout (`<parameter=k>\\nv\\n</parameter>`) is not the value."""
    edit = ("<seed:tool_call>\n<function=edit>\n<parameter=oldString>    return x\n</parameter>\n</function>\n"
            "</seed:tool_call>")
    assert [c.arguments for f in seed.find(edit, frozenset({"edit"})) for c in f.candidates] == [
        {"oldString": "    return x\n"}]
    laid = edit.replace(">    return x\n<", ">\n    return x\n\n<")
    assert [c.arguments for f in seed.find(laid, frozenset({"edit"})) for c in f.candidates] == [
        {"oldString": "    return x\n"}]
