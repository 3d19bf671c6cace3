"""The stream assembler: live content, held delimiters, accumulated calls."""

from __future__ import annotations

from sanctum_proxy.repair.streaming import Assembler


def feed_all(pieces, **delta_extra):
    a = Assembler()
    shown = [a.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces]
    return a, shown


def test_plain_content_is_released_as_it_arrives():
    _, shown = feed_all(["Hello", " world", "!"])
    assert shown == ["Hello", " world", "!"]


def test_partial_delimiter_is_held_then_released_when_it_is_not_one():
    _, shown = feed_all(["see <to", "day's news"])
    assert shown == ["see ", "<today's news"]


def test_call_markup_never_reaches_the_client():
    a, shown = feed_all(["Sure. <tool", '_call>{"name": "f", "arguments": {}}', "</tool_call>"])
    assert "".join(shown) == "Sure. "
    assert a.message()["content"].endswith("</tool_call>")


def test_llama_cpp_name_first_then_argument_fragments():
    a = Assembler()
    a.feed({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "X", "type": "function",
                                                   "function": {"name": "get_weather"}}]}}]})
    for frag in ['{"ci', 'ty": "Pa', 'ris"}']:
        a.feed({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": frag}}]}}]})
    a.feed({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})
    call = a.message()["tool_calls"][0]
    assert call["id"] == "X" and call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert a.finish_reason == "tool_calls"


def test_ollama_whole_call_with_object_arguments():
    a = Assembler()
    a.feed({"choices": [{"delta": {"tool_calls": [{"id": "call_1", "index": 0, "function": {
        "name": "f", "arguments": {"a": 1}}}]}}]})
    assert a.message()["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_repeated_full_name_is_not_doubled():
    a = Assembler()
    for _ in range(2):
        a.feed({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "web_search"}}]}}]})
    assert a.message()["tool_calls"][0]["function"]["name"] == "web_search"


def test_a_bare_first_call_name_is_held_when_the_family_opens_bare():
    a = Assembler(lead=True)
    shown = [a.feed({"choices": [{"index": 0, "delta": {"content": p}}]})
             for p in ["get_car", "_price\n", '{"car_name": "Song"}']]
    assert shown == ["", "", ""]
    b = Assembler(lead=True)
    assert [b.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in ["al", "l\n", "Hi", " there"]] \
        == ["", "", "Hi", " there"]  # `all\n` is markup: the text after it streams live
    c = Assembler(lead=True)
    assert [c.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in ["Hello", " world"]] \
        == ["", "Hello world"]  # a bare word waits one chunk
    _, plain = feed_all(["get_car", "_price"])
    assert plain == ["get_car", "_price"]  # other families stream as before


def test_an_offered_tools_bare_name_first_is_held_in_any_family():
    """mlx-swift-lm #491: GLM-4 wrote `get_weather\n{...}`; the functionary codec reads it at the start of any
    answer, so the stream holds a first line that names (or may still name) an offered tool, and only that."""
    names = frozenset({"get_weather"})

    def shown(pieces, **kw):
        a = Assembler(names=names, **kw)
        return [a.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces]

    assert shown(["get", "_weather", "\n", '{"location": "Paris"}']) == ["", "", "", ""]
    assert shown(["Hello", " world"]) == ["Hello", " world"]  # prose that names no tool flows at once
    assert shown(["get", " going"]) == ["", "get going"]  # a prefix of a name waits until it shows
    assert shown(["get_weather", " is the tool"]) == ["", "get_weather is the tool"]  # a name, not a call
    assert shown(["get_weather\n", "Paris is sunny."]) == ["", "get_weather\nParis is sunny."]
    assert shown(["all\n", "Hi"]) == ["all\n", "Hi"]  # `all\n` is markup only in Functionary's prompt


def test_gemma4_call_without_its_tokens_is_held_whatever_the_name_length():
    """vLLM with the special tokens stripped (openclaude PR 380): `call:NAME{...}` held, even for a name longer
    than every literal delimiter; `call:` in prose flows on."""
    name = "create_a_new_file_in_the_current_workspace_folder"
    a, shown = feed_all(list(f"call:{name}{{path:a.txt}}"))
    assert shown == [""] * len(shown) and a.message()["content"] == f"call:{name}{{path:a.txt}}"
    _, prose = feed_all(["One call: ", "get the weather", " then recall: it.", " Done"])
    assert "".join(prose) == "One call: get the weather then recall: it. Done"


def test_functioncall_tag_is_held():
    """maxi1134/ha-config#66: `<functioncall {...}>` (glaive's tag) never reaches the client as prose."""
    _, shown = feed_all(["<function", 'call {"name": "HassTurnOn", ', '"arguments": {}}>'])
    assert shown == ["", "", ""]


def test_json_call_with_a_newline_after_the_brace_is_held():
    a, shown = feed_all(["Here: {", '\n  "name": "f",', ' "arguments": {}}'])
    assert shown == ["Here: ", "", ""]


def test_braces_and_brackets_in_prose_flow_on():
    _, shown = feed_all(["use {x} and ", "[1, 2] or [see", " notes] ok"])
    assert "".join(shown) == "use {x} and [1, 2] or [see notes] ok"


def test_every_codec_tag_is_held_even_split():
    for tag in ("<|tool_call_start|>", "<|python_start|>", "[TOOL_CALLS]", "<function="):
        _, shown = feed_all(["ok ", tag[:3], tag[3:], "f()"])
        assert "".join(shown) == "ok ", tag
