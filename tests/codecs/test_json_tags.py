"""codecs/json_tags.py on its own: JSON calls inside the wrapper tags of Hunyuan, Jamba, InternLM2, Granite-20B-FC,
LongCat, Nemotron-Nano-v2, Apertus and GigaChat; the whole wrapper leaves the content with the call."""

from __future__ import annotations

import pytest

from sanctum_proxy.codecs import json_tags
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

BOOK = Toolbox.from_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}])
ARGS = '{"name": "get_weather", "arguments": {"city": "Tokyo"}}'


@pytest.mark.parametrize("text", [
    f"Sure. <tool_calls>[{ARGS}]</tool_calls>",
    f"Sure. <|action_start|><|plugin|>{ARGS.replace('arguments', 'parameters')}<|action_end|>",
    f"Sure.\n<function_call> {ARGS}",
    f"Sure.\n<longcat_tool_call>{ARGS}</longcat_tool_call>",
    f"Sure.<TOOLCALL>[{ARGS}]</TOOLCALL>",
    'Sure. <|tools_prefix|>[{"get_weather": {"city": "Tokyo"}}]<|tools_suffix|>',
    f"Sure.<|message_sep|>\n\nfunction call<|role_sep|>\n{ARGS}</s>",
    f"Sure.<|function_call|>{ARGS}</s>",
])
def test_the_call_and_its_whole_wrapper_leave_the_content(text: str) -> None:
    out = assess({"role": "assistant", "content": text}, BOOK)
    assert [(c.name, c.arguments) for c in out.calls] == [("get_weather", '{"city":"Tokyo"}')]
    assert out.content == "Sure." and not out.problems


def test_two_granite_calls_without_closers_are_two_calls() -> None:
    text = f"<function_call> {ARGS}\n<function_call> {ARGS.replace('Tokyo', 'Osaka')}"
    found = json_tags.find(text, frozenset({"get_weather"}))
    assert [c.arguments for f in found for c in f.candidates] == [{"city": "Tokyo"}, {"city": "Osaka"}]
    assert found[-1].end == len(text)


def test_a_wrapper_named_in_prose_is_text() -> None:
    text = "Models like Hunyuan write <tool_calls> around their calls."
    assert json_tags.find(text, frozenset({"get_weather"})) == []
    assert assess({"role": "assistant", "content": text}, BOOK).content == text


def test_the_word_function_streams_on_as_prose() -> None:
    """GigaChat 3's opener begins with a word: the stream holds at its special tokens, never at `function`."""
    assert not any(start.startswith("function") for start in json_tags.STARTS)
