"""core/loose_json.py: a JSON value whose strings a model wrote unescaped (raw newlines, bare quotes) is read where
that reading is the only one; an ambiguous text, broken structure or hostile depth is no reading."""

from __future__ import annotations

from sanctum_proxy.core.loose_json import MAX_DEPTH, read


def test_a_raw_newline_and_bare_quotes_in_a_string_are_read() -> None:
    text = '{"path": "a.py", "content": "print("hi")\nx = 1"}'
    got = read(text, 0)
    assert got is not None
    assert got.value == {"path": "a.py", "content": 'print("hi")\nx = 1'}
    assert got.end == len(text)
    assert set(got.repairs) == {"unescaped_quotes", "control_characters"}


def test_valid_json_needs_no_repair_and_the_start_is_honoured() -> None:
    text = 'call: {"a": [1, 2.5, true, null, "x\\ny"]} then prose'
    got = read(text, 6)
    assert got is not None
    assert (got.value, got.repairs) == ({"a": [1, 2.5, True, None, "x\ny"]}, ())
    assert text[got.end:] == " then prose"
    assert read(text, 0) is None  # not at a bracket
    assert read(text, 6, to_end=True) is None


def test_a_text_read_two_ways_is_no_reading() -> None:
    one = read('{"k": {"v": "a"}} and b', 0)
    assert one is not None and one.value == {"k": {"v": "a"}}
    assert read('{"k": {"v": "a"}} and "b"}}', 0) is None  # the value ends after "a"}} or after "b"}}


def test_broken_structure_and_deep_nesting_are_no_reading() -> None:
    assert read('{"a": 1,, "b": 2}', 0) is None
    assert read("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2), 0) is None
