"""codecs/base.py's pieces: `Scanner` answers as `str.find` for a reader moving forward, `blank` keeps positions,
the GBNF a plain-text format's call makes (`json_between`, `gbnf_literal`), result tags, registration checks."""

from __future__ import annotations

import random

import pytest

from sanctum_proxy.codecs.base import (
    Codec,
    Scanner,
    blank,
    gbnf_literal,
    json_between,
    register,
    template_has,
    tool_response,
)
from sanctum_proxy.core.calls import Found


def test_scanner_agrees_with_str_find_for_a_forward_reader() -> None:
    rng = random.Random(7)
    text = "".join(rng.choice("ab</>x") for _ in range(2000))
    scanner = Scanner(text)
    pos = 0
    while pos < len(text):
        for needle in ("</a>", "b<", "xx", "zz"):
            end = pos + rng.randrange(1, 400) if rng.random() < 0.5 else None
            assert scanner.find(needle, pos, end) == (text.find(needle, pos, end) if end is not None else
                                                      text.find(needle, pos))
        pos += rng.randrange(1, 40)


def test_scanner_looks_again_when_the_reader_goes_back() -> None:
    scanner = Scanner("a-b-a")
    assert scanner.find("a", 1) == 4
    assert scanner.find("a", 0) == 0


def test_blank_replaces_spans_with_spaces_and_keeps_positions() -> None:
    text = "one <call/> two <call/> three"
    spans = [Found(16, 23, ()), Found(4, 11, ())]
    assert blank(text, spans) == "one " + " " * 7 + " two " + " " * 7 + " three"
    assert len(blank(text, spans)) == len(text)


def test_json_between_writes_the_text_around_the_arguments_rule() -> None:
    grammar = json_between(lambda name, arguments: f"<call>{name}\n{arguments}</call>")
    assert grammar("f", "args-f") == '"<call>f\\n" args-f "</call>"'
    assert json_between(lambda name, arguments: f"{arguments}")("f", "r") == "r"
    assert gbnf_literal('a"\\\t\x01') == '"a\\"\\\\\\t\\x01"'


def test_tool_response_and_template_has() -> None:
    assert tool_response("get_weather", "call_1", "sunny") == (
        '<tool_response name="get_weather" id="call_1">\nsunny\n</tool_response>')
    assert tool_response("f", "", "x").startswith('<tool_response name="f">')
    detect = template_has("<tool_call>", "[TOOL_CALLS]")
    assert detect("... [TOOL_CALLS] ...") and not detect("plain")


def test_a_codec_name_registers_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register(Codec("hermes", lambda text, names: [], (), rank=1))
