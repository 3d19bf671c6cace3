"""codecs/python_scan.py through pythonic.parse: the not-quite-Python the peers' pythonic parsers recover (vLLM's
test_lfm2_tool_parser.py and test_pythonic_tool_parser.py), one call at a time."""

from __future__ import annotations

import time

import pytest

from sanctum_proxy.codecs import pythonic
from sanctum_proxy.codecs.registry import find_calls
from sanctum_proxy.core.shapes import JSONValue


def read(source: str, names: frozenset[str] = frozenset()) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for c in pythonic.parse(source, explicit=not names, names=names)]


@pytest.mark.parametrize(("source", "arguments"), [
    ("exec(command='cat > f.py << EOF\nimport csv\nEOF')", {"command": "cat > f.py << EOF\nimport csv\nEOF"}),
    ("bash(command='sed -n '360,450p' a.py')", {"command": "sed -n '360,450p' a.py"}),
    ("bash(command='python3 -c \"f(x='\\,')\"')", {"command": "python3 -c \"f(x='\\,')\""}),
    ("set_date(month=07, day=05)", {"month": 7, "day": 5}),
    ("label(tags={'urgent', 'bug'})", {"tags": ["urgent", "bug"]}),
])
def test_text_ast_refuses_is_read(source: str, arguments: JSONValue) -> None:
    assert [args for _, args in read(source)] == [arguments]


def test_a_bad_sibling_costs_only_itself() -> None:
    assert read("[bad(x=b'z'), f(a=1), calc(x=1e999)]") == [("f", {"a": 1})]


def test_an_unclosed_quote_in_a_bare_list_costs_only_its_call() -> None:
    names = frozenset({"get_weather", "f"})
    found = find_calls("[get_weather(city='SF'), f(a='x 'y' 'z)]", names)
    assert [(c.name, c.arguments) for f in found for c in f.candidates] == [("get_weather", {"city": "SF"})]


def test_nothing_that_reads_as_no_call_is_made_into_one() -> None:
    assert read("[f(a='x 'y' 'z), g(b='p 'q' 'r)]") == []
    assert read("[foo(x=1])]") == []


def test_quotes_built_to_branch_are_read_in_bounded_time() -> None:
    start = time.perf_counter()
    read("[f(a='x" + " 'x'" * 20_000 + ")]")
    assert time.perf_counter() - start < 2
