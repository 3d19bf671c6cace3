"""Getting JSON out of what models write: lossless mends happen, inventing or cutting content does not."""

from __future__ import annotations

import pytest

from sanctum_proxy.core.decoded_json import Decoded, Undecodable
from sanctum_proxy.core.lenient_json import decode


def mended(text: str) -> Decoded:
    out = decode(text)
    assert isinstance(out, Decoded), out
    return out


def test_valid_json_needs_no_mend() -> None:
    assert mended('{"a": [1, 2]}') == Decoded({"a": [1, 2]}, ())


@pytest.mark.parametrize(
    ("text", "value", "repair"),
    [
        ('{"a": 1,}', {"a": 1}, "trailing_comma"),
        ("{'a': 'b'}", {"a": "b"}, "single_quotes"),
        ('{"a": True, "b": None}', {"a": True, "b": None}, "python_literals"),
        ('{"a": 1 // one\n}', {"a": 1}, "comments"),
        ('{"a": /* x */ 1}', {"a": 1}, "comments"),
        ("{a: 1}", {"a": 1}, "unquoted_keys"),
        ('```json\n{"a": 1}\n```', {"a": 1}, "code_fence"),
        ('Here you go: {"a": 1} hope it helps', {"a": 1}, "surrounding_text"),
        ('{"a": {"b": 1}', {"a": {"b": 1}}, "unclosed_braces"),
        ('{"a": 1}}', {"a": 1}, "extra_braces"),
        ('{"a": [{"b": 1]}', {"a": [{"b": 1}]}, "mismatched_braces"),
        ('{"p": "C:\\path\\d+"}', {"p": "C:\\path\\d+"}, "invalid_escapes"),
        ('{"t": "line1\nline2"}', {"t": "line1\nline2"}, "control_characters"),
        ('{"a":1}{"a":1}{"a":1}', {"a": 1}, "repeated_arguments"),
    ],
)
def test_lossless_mends_are_made_and_named(text: str, value: object, repair: str) -> None:
    out = mended(text)
    assert out.value == value
    assert repair in out.repairs


def test_apostrophe_inside_a_double_quoted_string_survives() -> None:
    assert mended('{"query": "what\'s the weather",}').value == {"query": "what's the weather"}


def test_single_quoted_string_with_double_quote_inside_stays_exact() -> None:
    assert mended("{'q': 'say \"hi\"'}").value == {"q": 'say "hi"'}


def test_cut_off_string_is_not_closed() -> None:
    out = decode('{"file_path": "a.cs", "new_content": "using System;\\n...Task<Proj')
    assert isinstance(out, Undecodable)
    assert "cut off" in out.why


def test_missing_value_is_not_invented() -> None:
    assert isinstance(decode('{"a": '), Undecodable)
    assert isinstance(decode('{"a" 1}'), Undecodable)


def test_two_different_values_are_not_merged() -> None:
    assert isinstance(decode('{"a": 1} {"b": 2}'), Undecodable)


def test_prose_without_json_is_undecodable() -> None:
    assert isinstance(decode("I cannot do that."), Undecodable)


def test_deep_nesting_is_refused_without_raising() -> None:
    assert isinstance(decode("[" * 100_000), Undecodable)
    assert isinstance(decode("[" * 5000 + "]" * 4999), Undecodable | Decoded)


def test_nan_is_not_json() -> None:
    out = decode('{"a": NaN}')
    assert not (isinstance(out, Decoded) and out.value != out.value)
