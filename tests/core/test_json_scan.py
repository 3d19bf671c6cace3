"""Where a JSON value in a model's text ends: closers inside strings do not count, an unclosed value has no end."""

from __future__ import annotations

from sanctum_proxy.core.json_scan import value_end


def test_value_end_skips_closers_inside_strings() -> None:
    text = 'x {"a": "}</tool_call>{", "b": [1]} tail'
    assert text[2 : value_end(text, 2)] == '{"a": "}</tool_call>{", "b": [1]}'


def test_value_end_is_none_for_an_unclosed_value() -> None:
    assert value_end('{"a": [1, 2}', 0) is None
    assert value_end('{"a": "open', 0) is None
