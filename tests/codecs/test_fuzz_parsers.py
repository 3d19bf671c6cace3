"""Fuzzing the pure parsers: every codec, the JSON extraction, tier 1 (mend, validate, coerce) and the
correction text. Zero crashes, zero hangs, and a call that tier 1 accepts always has arguments valid under
its tool's schema by jsonschema itself (not by the proxy's own validator). Pathological inputs (deep
nesting, megabyte strings, thousands of calls) finish in bounded time.

Budget: the hypothesis profile (`ci` by default, HYPOTHESIS_PROFILE=long for a fuzzing run).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sanctum_proxy.codecs.base import MAX_CANDIDATES
from sanctum_proxy.codecs.registry import CODECS, FORMATS, find_calls
from sanctum_proxy.core.decoded_json import Decoded, Undecodable
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.lenient_json import decode
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.round_body import correction
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import coerce

SCHEMAS: dict[str, dict[str, Any]] = {
    "search": {"type": "object", "properties": {
        "q": {"type": "string", "minLength": 1}, "n": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["q"],
        "additionalProperties": False},
    "set_mode": {"type": "object", "properties": {
        "mode": {"enum": ["fast", "slow"]}, "level": {"type": "number"}, "on": {"type": "boolean"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}},
        "required": ["mode"]},
    "free": {"type": "object", "properties": {"x": {"type": ["string", "null"]}},
             "additionalProperties": True},
    "pattern": {"type": "object", "patternProperties": {"^k_": {"type": "integer"}},
                "additionalProperties": False, "anyOf": [{"required": ["k_a"]}, {"required": ["k_b"]}]},
    "noop": {"type": "object", "properties": {}},
}
BOOK = Toolbox.from_tools([{"type": "function", "function": {"name": n, "parameters": s}}
                             for n, s in SCHEMAS.items()])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16)
names = st.sampled_from([*SCHEMAS, "Search", "functions.search", "unknown", "", "set-mode"])
# Every registered format's call, cut at its tags, and every codec's openers (a new format is fuzzed unasked).
_TAG = re.compile(r"(<[^<>]{0,40}>|\[[A-Z_]{2,16}\]|\n)")
REGISTERED = sorted({piece for fmt in FORMATS.values()
                     for piece in _TAG.split(fmt.render_call("search", {"q": "a", "n": 1})) if piece}
                    | {s for codec in CODECS for s in codec.starts})
fragments = st.sampled_from([*REGISTERED,
    "<tool_call>", "</tool_call>", "<|tool_call|>", "functools[", "[TOOL_CALLS]", "<|python_tag|>",
    "<|python_start|>", "<|tool_call_start|>", "<|tool_call_end|>", "<function=search>", "<function=",
    "</function>", "<parameter=q>", "</parameter>", "```json\n", "```tool_code\n", "```", "\n",
    '{"name": "search", "arguments": ', '{"name": "set_mode", "parameters": ', '"arguments": ',
    '{"q": "a"}', '{"mode": "fast"}', "{", "}", "[", "]", "(", ")", "'", '"', ",", ":", "\\", "\\u00",
    "search(q=", "set_mode(mode='fast')", "True", "None", "null", "NaN", "// c\n", "/*", "*/", "\x00", "é",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function<｜tool▁sep｜>search", "<｜tool▁call▁end｜>",
    "search<｜tool▁sep｜>", "<|channel|>", "analysis", "commentary to=functions.search", " <|constrain|>json",
    "<|message|>", "<|call|>", "<|end|>", "<|return|>", "<|start|>assistant", "final",
    "<tool_call>search\n", "<arg_key>q</arg_key>", "<arg_value>", "</arg_value>",
    "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.search:0", "<|tool_call_argument_begin|>",
    "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|START_ACTION|>", "<|END_ACTION|>",
    '{"tool_name": "search", "parameters": ', "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>",
    ">>>search\n", ">>>all\n", ">>>", "<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>",
])
pieces = st.one_of(fragments, json_values.map(json.dumps), st.text(max_size=8))
messy = st.lists(pieces, max_size=24).map("".join)
answers = st.fixed_dictionaries({"content": st.one_of(st.none(), messy)}, optional={
    "tool_calls": st.lists(st.fixed_dictionaries({
        "id": st.one_of(st.none(), st.text(max_size=6)),
        "function": st.fixed_dictionaries({"name": names, "arguments": st.one_of(
            messy, json_values.map(json.dumps), json_values, st.none())})}), max_size=3)})


def assert_accepted_calls_are_schema_valid(out: Any) -> None:
    for call in (*out.calls, *out.dropped):
        args = json.loads(call.arguments)
        jsonschema.validate(args, SCHEMAS[call.name])
        assert call.id


@given(messy)
def test_every_codec_reads_any_text_without_crashing(text: str) -> None:
    for codec in CODECS:
        for found in codec.find(text, BOOK.name_set):
            assert 0 <= found.start < found.end <= len(text)
            assert all(isinstance(c.name, str) for c in found.candidates)


@given(messy)
def test_registry_finds_ordered_disjoint_spans_within_the_cap(text: str) -> None:
    found = find_calls(text, BOOK.name_set)
    assert sum(len(f.candidates) for f in found) <= MAX_CANDIDATES
    for a, b in zip(found, found[1:], strict=False):
        assert a.end <= b.start


@given(st.one_of(messy, json_values.map(json.dumps), st.text()))
def test_decode_never_raises_and_gives_json(text: str) -> None:
    out = decode(text)
    assert isinstance(out, Decoded | Undecodable)
    if isinstance(out, Decoded):
        json.dumps(out.value, allow_nan=False)  # what it decodes can be sent on as JSON


@given(json_values)
def test_decode_reads_valid_json_exactly(value: Any) -> None:
    out = decode(json.dumps(value))
    assert isinstance(out, Decoded) and out.value == value and out.repairs == ()


@given(messy, st.booleans())
def test_value_end_is_inside_the_text_and_closes_the_opener(text: str, parens: bool) -> None:
    for start in [i for i, c in enumerate(text) if c in "{["][:8]:
        end = value_end(text, start, parens=parens)
        if end is not None:
            assert start < end <= len(text)
            assert {"{": "}", "[": "]"}[text[start]] == text[end - 1]


@given(answers, st.sampled_from([None, "stop", "length", "tool_calls"]), st.booleans())
def test_tier1_accepts_only_schema_valid_calls(message: dict[str, Any], finish: str | None,
                                               parallel: bool) -> None:
    out = assess(message, BOOK, finish_reason=finish, parallel_tool_calls=parallel)
    assert_accepted_calls_are_schema_valid(out)
    if out.problems:
        correction(out.problems, BOOK)  # every problem can be told to the model


@given(st.sampled_from(sorted(SCHEMAS)), json_values)
def test_native_call_with_any_arguments_is_valid_or_bounced(name: str, value: Any) -> None:
    for arguments in (json.dumps(value), value):
        out = assess({"tool_calls": [{"id": "c", "function": {"name": name, "arguments": arguments}}]}, BOOK)
        assert_accepted_calls_are_schema_valid(out)
        assert out.calls or out.problems or arguments in (None, "null")


@given(st.sampled_from(sorted(SCHEMAS)), st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_coerce_never_raises_and_keeps_keys(name: str, args: dict[str, Any]) -> None:
    coerced, repairs = coerce(args, SCHEMAS[name])
    assert set(coerced) == set(args)
    assert isinstance(repairs, tuple)
    assert BOOK.check(name, coerced) is not None


@given(st.sampled_from(sorted(SCHEMAS)), st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_toolbox_check_passes_only_what_jsonschema_passes(name: str, args: dict[str, Any]) -> None:
    """Stricter is allowed (contract 5: an argument not in `properties` is unexpected unless
    additionalProperties allows it); laxer never."""
    if BOOK.check(name, args) == []:
        jsonschema.validate(args, SCHEMAS[name])


# --- pathological inputs: bounded time ------------------------------------------------------------------

MB = 1_000_000
PATHOLOGICAL = {
    "deep_arrays": "[" * MB,
    "deep_objects": '{"a":' * (MB // 5),
    "balanced_deep": "[" * 50_000 + "]" * 50_000,
    "megabyte_string": '{"name": "search", "arguments": {"q": "' + "x" * MB + '"}}',
    "megabyte_unclosed_string": '{"name": "search", "arguments": {"q": "' + "x" * MB,
    "megabyte_backslashes": '{"q": "' + "\\" * MB,
    "thousands_of_hermes_calls": '<tool_call>{"name": "search", "arguments": {"q": "a"}}</tool_call>' * 5000,
    "thousands_of_bare_calls": '{"name": "search", "arguments": {"q": "a"}} ' * 20_000,
    "thousands_of_pythonic_calls": "[search(q='a')] " * 20_000,
    "thousands_of_qwen_calls": "<function=search><parameter=q>a</parameter></function>" * 5000,
    "qwen_values_never_closed": "<tool_call><function=search><parameter=q> a" * 50_000,
    "thousands_of_mistral_calls": '[TOOL_CALLS][{"name": "search", "arguments": {"q": "a"}}]' * 5000,
    "harmony_messages_without_an_end": "<|channel|>analysis<|message|>x" * 40_000 + "<|call|>",
    "thousands_of_harmony_calls": '<|channel|>commentary to=functions.search<|message|>{"q": "a"}<|call|>' * 5000,
    "glm_values_never_closed": "<tool_call>search\n" + "<arg_key>q</arg_key><arg_value>v" * 30_000,
    "thousands_of_kimi_calls": "<|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{}" * 30_000,
    "thousands_of_deepseek_calls": "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{}" * 30_000,
    "unclosed_command_r_thinking": "<|START_THINKING|>x" * 40_000 + "<|START_ACTION|>[" * 20_000,
    "thousands_of_functionary_calls": ">>>search\n{" * 60_000,
    # Gemma 4: openers whose unquoted values never close (each read would run to the end of the text)
    "gemma4_values_never_closed": "call:search{q:a," * 100_000,
    "gemma4_marked_values_never_closed": "<|tool_call>call:search{q:a <" * 50_000,
    "thousands_of_gemma4_calls": '<|tool_call>call:search{q:<|"|>a<|"|>}<tool_call|>' * 5000,
    "seed_think_and_unclosed_calls": "<seed:think>x" * 30_000 + "<seed:tool_call><function=search>" * 20_000,
    "unclosed_openers": "{ " * (MB // 2),
    "unclosed_fences": "```json\n" * (MB // 8),
    "unclosed_python_calls": "[f(" * (MB // 3),
    "unclosed_tags": "<tool_call>{" * 50_000,
    "quotes": "'\"" * (MB // 2),
    "ten_thousand_keys": "{" + ",".join(f'"k{i}": {i}' for i in range(100_000)) + ",}",
    # issue 18: broken call text that went to json_repair (seconds per 250 KB) or the token list (1.7 GB)
    "quarter_megabyte_broken_call": '<tool_call>{"name": "search", "arguments": {\'q\': undefined, '
                                    + "'k': 'v', " * 25_000 + "}}</tool_call>",
    "two_megabyte_single_quoted_call": "{'name': 'search', 'arguments': {'q': '" + "ab, cd: [1] " * (2 * MB // 12)
                                       + "'}}",
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_input_is_answered_in_bounded_time(name: str) -> None:
    text = PATHOLOGICAL[name]
    start = time.perf_counter()
    decode(text)
    out = assess({"content": text}, BOOK)
    assert len(out.calls) + len(out.problems) <= 2 * MAX_CANDIDATES
    assert time.perf_counter() - start < 10, "a linear pass over a megabyte takes well under a second"
