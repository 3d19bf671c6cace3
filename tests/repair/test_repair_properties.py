"""Properties of tier 1 over arbitrary input: it never raises, what it lets through is valid, and a valid
native answer passes untouched."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sanctum_proxy.codecs import hermes
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

SCHEMA = {
    "type": "object",
    "properties": {
        "q": {"type": "string"},
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["q"],
}
BOOK = Toolbox.from_tools(
    [
        {"type": "function", "function": {"name": "search", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "noop"}},
    ]
)
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
markup = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "<|python_tag|>",
        "<function=search>",
        "<parameter=q>",
        "</parameter>",
        "```json\n",
        "```",
        '{"name": "search", ',
        '"arguments": ',
        "{",
        "}",
        "[",
        "]",
        "'",
        '"',
        ",",
        "search(q=",
        ")",
        "True",
        "\\",
    ]
)
messy_text = st.lists(st.one_of(markup, st.text(max_size=12)), max_size=20).map("".join)
valid_args = st.fixed_dictionaries(
    {"q": st.text(max_size=20)},
    optional={"n": st.integers(), "tags": st.lists(st.text(max_size=5), max_size=3)},
)


def _check_calls_are_valid(out: Any) -> None:
    for call in out.calls + out.dropped:
        args = json.loads(call.arguments)
        assert BOOK.check(call.name, args) == []
        assert call.id


@FAST
@given(messy_text, st.sampled_from([None, "stop", "length"]))
def test_assess_never_raises_on_arbitrary_content(text: str, finish: str | None) -> None:
    _check_calls_are_valid(assess({"role": "assistant", "content": text}, BOOK, finish_reason=finish))


@FAST
@given(st.one_of(messy_text, json_values.map(json.dumps)), st.text(max_size=30))
def test_assess_never_raises_on_arbitrary_native_arguments(arguments: str, name: str) -> None:
    message = {
        "tool_calls": [
            {"id": "x", "function": {"name": name, "arguments": arguments}},
            {"id": "y", "function": {"name": "search", "arguments": arguments}},
        ]
    }
    _check_calls_are_valid(assess(message, BOOK))


@FAST
@given(json_values)
def test_assess_never_raises_on_arbitrary_messages(message: Any) -> None:
    assess(message, BOOK)
    assess({"tool_calls": message, "content": message}, BOOK)


@FAST
@given(valid_args, st.integers(0, 3))
def test_valid_native_answer_comes_back_byte_identical(args: dict[str, Any], indent: int) -> None:
    text = json.dumps(args, indent=indent or None, ensure_ascii=bool(indent % 2))
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": text}}
        ],
    }
    out = assess(message, BOOK)
    assert out.repairs == () and out.problems == ()
    assert [(c.id, c.name, c.arguments) for c in out.calls] == [("call_1", "search", text)]


# Reasoning and call markers of every format (a string st.text rarely draws): inside a call they are its text.
MARKERS = ("<think>", "</think>", "[THINK]", "<|START_THINKING|>", "<|END_THINKING|>", "<seed:think>",
           "</seed:think>", "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant",
           "<|START_ACTION|>", "<|END_ACTION|>")  # Command-R's call markers too (a call opener, not reasoning)


@FAST
@given(st.one_of(valid_args, st.fixed_dictionaries({"q": st.lists(
    st.one_of(st.sampled_from(MARKERS), st.text(max_size=5)), max_size=4).map("".join)})))
@example({"q": "<|channel|>analysis<|message|><|START_ACTION|>"})  # a nameless opener after a reasoning opener
def test_rendered_hermes_call_is_read_back(args: dict[str, Any]) -> None:
    out = assess({"content": hermes.render_call("search", args)}, BOOK)
    assert [json.loads(c.arguments) for c in out.calls] == [args]
    assert out.content is None
