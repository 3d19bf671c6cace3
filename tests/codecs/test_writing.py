"""codecs/writing.py: how the formats write a call's pieces; arguments given as JSON text that does not parse are
kept as written, never dropped or fixed."""

from __future__ import annotations

import json

from sanctum_proxy.codecs.writing import arguments_text, as_object, json_call, pairs, to_json

BROKEN = '{"city": "Paris",'


def test_as_object_parses_json_text_and_keeps_broken_text() -> None:
    assert as_object('{"city": "Paris"}') == {"city": "Paris"}
    assert as_object(BROKEN) == BROKEN
    assert as_object(None) == {}
    assert as_object({"a": 1}) == {"a": 1}


def test_arguments_text_and_json_call() -> None:
    assert arguments_text({"city": "Paris"}) == '{"city":"Paris"}'
    assert arguments_text(BROKEN) == BROKEN
    assert json.loads(json_call("get_weather", {"city": "Paris"})) == {"name": "get_weather",
                                                                       "arguments": {"city": "Paris"}}
    assert json.loads(json_call("f", "{}", key="parameters")) == {"name": "f", "parameters": {}}
    assert json_call("get_weather", BROKEN) == '{"name": "get_weather", "arguments": ' + BROKEN + "}"


def test_to_json_writes_integers_past_64_bits() -> None:
    assert to_json({"n": 2**70}) == '{"n":1180591620717411303424}'


def test_pairs_write_strings_as_written_and_the_rest_as_json() -> None:
    assert pairs({"city": "Paris", "days": 3, "tags": ["a"], "x": None}) == [
        ("city", "Paris"), ("days", "3"), ("tags", '["a"]'), ("x", "null")]
    assert pairs(BROKEN) is None
    assert pairs("[1, 2]") is None
