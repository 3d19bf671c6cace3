"""grammar.gbnf: the GBNF of a prompted answer. Whether llama.cpp parses these grammars and holds a model to
them is checked against the real llama-server in tests/e2e/test_grammar_real.py; here, what the grammar says."""

from __future__ import annotations

import re

import pytest

from sanctum_proxy.codecs import families
from sanctum_proxy.repair.grammar import GRAMMAR_FORMATS, MAX_PARALLEL_CALLS, gbnf
from sanctum_proxy.repair.toolbox import Toolbox


def book(*tools: tuple[str, dict]) -> Toolbox:
    return Toolbox.from_tools([{"type": "function", "function": {"name": n, "parameters": p}} for n, p in tools])


WEATHER = ("get_weather", {"type": "object", "properties": {"city": {"type": "string"},
                                                            "unit": {"enum": ["c", "f"]}},
                           "required": ["city"]})
TIME = ("get_time", {"type": "object", "properties": {"zone": {"type": "string"}}})


def rules(grammar: str) -> dict[str, str]:
    out = {}
    for line in grammar.splitlines():
        name, _, body = line.partition(" ::= ")
        assert name and re.fullmatch(r"[a-zA-Z0-9-]+", name), line
        assert name not in out, f"rule {name} defined twice"
        out[name] = body
    return out


def test_every_rule_used_is_defined() -> None:
    grammar = gbnf(book(WEATHER, TIME), "hermes", text=True, parallel=True)
    assert grammar is not None
    defined = rules(grammar)
    for body in defined.values():
        bare = re.sub(r'"(?:\\.|[^"\\])*"|\[[^\]]*\]', "", body)  # without literals and classes
        for used in re.findall(r"[a-z][a-z0-9-]*", bare):
            assert used in defined, f"{used} used, not defined"


@pytest.mark.parametrize("fmt", sorted(GRAMMAR_FORMATS))
def test_the_call_is_written_as_the_prompt_renders_it(fmt: str) -> None:
    grammar = gbnf(book(WEATHER), fmt, text=False, parallel=False)
    assert grammar is not None
    prefix, _, suffix = families.render_call(fmt, "get_weather", "\x00").partition("\x00")
    literal = prefix.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    assert f'"{literal}"' in grammar
    assert suffix.replace('"', '\\"').replace("\n", "\\n") in grammar


def test_formats_without_a_grammar_and_empty_books_give_none() -> None:
    for fmt in set(families.FORMAT_NAMES) - GRAMMAR_FORMATS:
        assert gbnf(book(WEATHER), fmt, text=False, parallel=False) is None, fmt
    assert gbnf(Toolbox([]), "hermes", text=True, parallel=True) is None


def test_required_properties_always_optional_ones_may_follow() -> None:
    grammar = gbnf(book(WEATHER), "hermes", text=False, parallel=False)
    assert grammar is not None
    objects = [b for b in rules(grammar).values() if '"\\"city\\"" ws ":" ws string' in b]
    assert len(objects) == 1 and objects[0].startswith('"{" ws "\\"city\\""')  # city first, always
    unit = next(b for b in rules(grammar).values() if b.startswith('("," ws "\\"unit\\""'))
    assert '("\\"c\\"" | "\\"f\\"")' in unit and unit.endswith(")?")


def test_an_object_of_optional_properties_may_be_empty_or_start_with_any() -> None:
    two = ("t", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}})
    grammar = gbnf(book(two), "hermes", text=False, parallel=False)
    assert grammar is not None
    defined = rules(grammar)
    start = next(n for n, b in defined.items() if b.startswith('"\\"a\\"" ws ":" ws integer'))
    after_a = defined[start].split(" | ")[0].split()[-1]
    assert defined[after_a] == '("," ws "\\"b\\"" ws ":" ws boolean ws)?'  # a, then b or not
    alone = defined[start].split(" | ")[1]
    assert defined[alone] == '"\\"b\\"" ws ":" ws boolean ws'  # or b alone
    assert any(b == f'"{{" ws {start}? "}}"' for b in defined.values())  # or nothing


def test_a_tool_without_properties_takes_an_empty_object() -> None:
    grammar = gbnf(book(("get_time", {"type": "object", "properties": {}})), "hermes", text=False, parallel=False)
    assert grammar is not None and '"{" ws "}"' in grammar and " object " not in rules(grammar)["r0"] + " "


def test_text_may_win_only_when_asked_and_never_begins_like_a_call() -> None:
    only_calls = gbnf(book(WEATHER), "hermes", text=False, parallel=False)
    with_text = gbnf(book(WEATHER), "hermes", text=True, parallel=False)
    assert only_calls is not None and with_text is not None
    assert "[^" not in rules(only_calls)["root"]
    root = rules(with_text)["root"]
    first = re.search(r"\| \[\^([^\]]*)\]", root)
    assert first is not None and {"<", " ", "\\n", "\\t"} <= set(re.findall(r"\\.|.", first.group(1)))


def test_parallel_calls_are_bounded() -> None:
    grammar = gbnf(book(WEATHER, TIME), "hermes", text=False, parallel=True)
    assert grammar is not None
    assert f"{{0,{MAX_PARALLEL_CALLS - 1}}}" in rules(grammar)["root"]


def test_local_refs_become_rules_and_may_recurse() -> None:
    tree = ("walk", {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["name"]}}, "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"]})
    grammar = gbnf(book(tree), "hermes", text=False, parallel=False)
    assert grammar is not None
    defined = rules(grammar)
    ref = next(n for n in defined if n.startswith("ref"))
    assert defined[ref] and any(ref in body for name, body in defined.items() if name != ref)


def test_names_and_enum_values_are_escaped() -> None:
    odd = ("say", {"type": "object", "properties": {"q": {"enum": ['a"b', "c\\d", "line\nbreak"]}},
                   "required": ["q"]})
    grammar = gbnf(book(odd), "hermes", text=False, parallel=False)
    assert grammar is not None
    assert '"\\"a\\\\\\"b\\""' in grammar  # the JSON text "a\"b" as a GBNF literal
    assert "\n" not in "".join(rules(grammar).values())
