"""Every call format models write into content is found, read and located, and prose is not a call."""

from __future__ import annotations

from sanctum_proxy.codecs import hermes, json_blocks
from sanctum_proxy.codecs.registry import find_calls, stream_starts
from sanctum_proxy.core.calls import Candidate

NAMES = frozenset({"get_weather", "terminal", "search"})


def calls(text: str) -> list[tuple[str, object, str]]:
    return [(c.name, c.arguments, c.source) for f in find_calls(text, NAMES) for c in f.candidates]


def markup(text: str) -> list[str]:
    return [text[f.start : f.end] for f in find_calls(text, NAMES)]


def test_hermes_call_is_found_with_its_span() -> None:
    text = 'Hello!\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert calls(text) == [("get_weather", {"city": "Paris"}, "hermes")]
    assert markup(text) == [text[7:]]


def test_hermes_missing_outer_brace_is_read() -> None:
    text = '<tool_call>{"name": "terminal", "arguments": {"command": "ls -la"}</tool_call>'
    (found,) = find_calls(text, NAMES)
    assert found.candidates[0].arguments == {"command": "ls -la"}
    assert "unclosed_braces" in found.candidates[0].repairs
    assert (found.start, found.end) == (0, len(text))


def test_literal_end_tag_inside_a_string_does_not_cut_the_call() -> None:
    text = '<tool_call>{"name": "terminal", "arguments": {"command": "echo </tool_call>"}}</tool_call>'
    assert calls(text) == [("terminal", {"command": "echo </tool_call>"}, "hermes")]


def test_hermes_with_unknown_name_is_still_a_candidate() -> None:
    text = '<tool_call>\n{"name": "create", "arguments": {"title": "t"}}\n</tool_call>'
    assert calls(text) == [("create", {"title": "t"}, "hermes")]


def test_unreadable_hermes_payload_is_kept_as_text_arguments() -> None:
    (cand,) = [
        c
        for f in find_calls('<tool_call>{"name": "search", "arguments": {"q": "x</tool_call>', NAMES)
        for c in f.candidates
    ]
    assert cand.name == "search"
    assert isinstance(cand.arguments, str)


def test_hermes_without_closing_tag_runs_to_the_end() -> None:
    assert calls('<tool_call>\n{"name": "search", "arguments": {"q": "x"}}') == [
        ("search", {"q": "x"}, "hermes")
    ]


def test_mistral_nemo_array_with_ids_and_trailing_prose() -> None:
    text = (
        "[TOOL_CALLS][{'name': 'get_weather', 'arguments': {'city': 'Dallas'}}, "
        "{'name': 'get_weather', 'arguments': {'city': 'SF'}, 'id': 'abc123def'}]$$ In order to"
    )
    found = find_calls(text, NAMES)
    got = [c for f in found for c in f.candidates]
    assert [c.arguments for c in got] == [{"city": "Dallas"}, {"city": "SF"}]
    assert got[1].id == "abc123def"
    assert text[found[-1].end :] == "$$ In order to"


def test_mistral_small_name_args_form() -> None:
    text = 'Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]search[ARGS]{"q": "x"}'
    assert calls(text) == [
        ("get_weather", '{"city": "Rome"}', "mistral"),
        ("search", '{"q": "x"}', "mistral"),
    ]


def test_llama_python_tag_with_parameters_key() -> None:
    text = '<|python_tag|>{"name": "search", "parameters": {"q": "news"}}<|eom_id|>'
    assert calls(text) == [("search", {"q": "news"}, "llama")]
    assert markup(text) == [text]


def test_llama4_python_start_end() -> None:
    text = '<|python_start|>{"name": "search", "parameters": {"q": "n"}}<|python_end|>'
    assert markup(text) == [text]


def test_pythonic_list_of_calls() -> None:
    text = "[get_weather(city='Paris', days=3), search(q=\"x\", exact=True)]"
    assert calls(text) == [
        ("get_weather", {"city": "Paris", "days": 3}, "pythonic"),
        ("search", {"q": "x", "exact": True}, "pythonic"),
    ]


def test_pythonic_inside_lfm_tags_accepts_any_name() -> None:
    text = '<|tool_call_start|>[list_directory(path="desktop")]<|tool_call_end|>'
    assert calls(text) == [("list_directory", {"path": "desktop"}, "pythonic")]
    assert markup(text) == [text]


def test_pythonic_with_unknown_name_in_prose_is_not_a_call() -> None:
    assert calls("Use [print(x=1)] to print.") == []


def test_qwen_xml_with_duplicated_closer() -> None:
    text = (
        "<tool_call>\n<function=terminal>\n<parameter=command>\nls /tmp\n</parameter>\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    (found,) = find_calls(text, NAMES)
    assert found.candidates[0].arguments == {"command": "ls /tmp"}
    assert "stray_closing_tag" in found.candidates[0].repairs
    assert (found.start, found.end) == (0, len(text))


def test_functionary_function_tag_with_json_body() -> None:
    assert calls('<function=search>{"q": "x"}</function>') == [("search", '{"q": "x"}', "qwen_xml")]


def test_fenced_json_call_takes_the_whole_fence() -> None:
    text = 'Calling:\n```json\n{"name": "search", "parameters": {"q": "ollama"}}\n```\nDone.'
    assert calls(text) == [("search", {"q": "ollama"}, "json")]
    assert markup(text) == ['```json\n{"name": "search", "parameters": {"q": "ollama"}}\n```']


def test_bare_concatenated_and_semicolon_separated_calls() -> None:
    text = (
        '{"name": "get_weather", "arguments": {"city": "SF"}} {"name": "search", "arguments": {"q": "a"}};'
        '{"name":"search","arguments":{"q":"b"}}'
    )
    assert [c[1] for c in calls(text)] == [{"city": "SF"}, {"q": "a"}, {"q": "b"}]


def test_openai_wrapper_and_llama_cpp_generic_wrappers() -> None:
    assert calls('{"type": "function", "function": {"name": "search", "arguments": "{\\"q\\": 1}"}}') == [
        ("search", '{"q": 1}', "json")
    ]
    assert calls('{"tool_call": {"name": "search", "arguments": {"q": 1}}}') == [("search", {"q": 1}, "json")]
    assert len(calls('{"tool_calls": [{"name": "search", "arguments": {}}, {"name": "terminal"}]}')) == 2


def test_json_in_prose_with_unknown_name_is_not_a_call() -> None:
    assert calls('The user object is {"name": "Bob", "arguments": {"x": 1}}.') == []
    assert calls('Config: {"a": 1, "b": [1, 2]}') == []


def test_name_that_resolves_counts_in_bare_json() -> None:
    assert calls('{"name": "functions.Search", "arguments": {"q": 1}}')[0][0] == "functions.Search"


def test_json_rpc_and_name_as_key_shapes_for_known_tools() -> None:
    assert calls('{"jsonrpc": "2.0", "method": "search", "params": {"q": "x"}}') == [
        ("search", {"q": "x"}, "json")
    ]
    assert calls('[{"search": {"q": "x"}}]') == [("search", {"q": "x"}, "json")]


def test_spans_never_overlap() -> None:
    text = '<tool_call>{"name": "search", "arguments": {"q": "[search(q=1)]"}}</tool_call> {"name": "search"}'
    found = find_calls(text, NAMES)
    assert all(a.end <= b.start for a, b in zip(found, found[1:], strict=False))
    assert len(found) == 2


def test_stream_starts_list_every_delimiter_once_and_no_generic_opener() -> None:
    starts = stream_starts()
    assert {"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<function=", "```json", "<tools>"} <= set(starts)
    assert not {"```", "{", "["} & set(starts)  # held only in a call's shape (Codec.shape)
    assert len(starts) == len(set(starts))


def test_hermes_render_round_trips() -> None:
    text = hermes.render_call("search", {"q": "ü"})
    assert text == '<tool_call>\n{"name":"search","arguments":{"q":"ü"}}\n</tool_call>'
    assert calls(text) == [("search", {"q": "ü"}, "hermes")]
    assert json_blocks.render_fenced("search", {}) == '```json\n{"name":"search","arguments":{}}\n```'


def test_candidate_count_is_capped() -> None:
    text = '{"name": "search", "arguments": {}} ' * 500
    total = sum(len(f.candidates) for f in find_calls(text, NAMES))
    assert 0 < total <= 128


def test_candidates_carry_raw_text() -> None:
    (found,) = find_calls('<tool_call>{"name": "search", "arguments": {}}</tool_call>', NAMES)
    assert isinstance(found.candidates[0], Candidate)
    assert "search" in found.candidates[0].raw
