"""repair/schemas.py: which tool schemas the proxy refuses and why (references outside the schema, patterns RE2
cannot run or that compile too large, nesting, expansion), how much a schema expands and branches, and patterns
checked with RE2."""

from __future__ import annotations

from typing import Any

from sanctum_proxy.repair.schemas import (
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_EXPANSION,
    branches,
    expansion,
    pattern_count,
    refusal,
    search,
)

PLAIN = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}}}


def test_a_plain_schema_is_taken() -> None:
    assert refusal(PLAIN) is None
    assert refusal({"$defs": {"c": {"type": "string"}}, "properties": {"c": {"$ref": "#/$defs/c"}}}) is None


def test_each_refusal_says_why() -> None:
    outside = refusal({"properties": {"a": {"$ref": "https://example.com/s.json"}}})
    assert outside is not None and "refers outside the schema" in outside
    lookahead = refusal({"properties": {"a": {"type": "string", "pattern": "(?=a)a"}}})
    assert lookahead is not None and "linear time" in lookahead
    huge = refusal({"properties": {"a": {"type": "string", "pattern": r"(\pL|\pN){400}"}}})
    assert huge is not None and "larger than the proxy's budget" in huge
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH + 1):
        deep = {"type": "array", "items": deep}
    deep_reason = refusal(deep)
    assert deep_reason is not None and "nested more than" in deep_reason


def test_expansion_counts_each_use_of_a_reference() -> None:
    small = {"$defs": {"n": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}},
             "type": "object", "properties": {"x": {"$ref": "#/$defs/n"}, "y": {"$ref": "#/$defs/n"}}}
    assert expansion(small) > expansion({**small, "properties": {"x": {"$ref": "#/$defs/n"}}})
    # each level refers to the one below twice: 2**30 subschemas for a schema of 30 definitions
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(30)}
    defs["d30"] = {"type": "string"}
    bomb = {"$defs": defs, "$ref": "#/$defs/d0"}
    assert expansion(bomb) > MAX_SCHEMA_EXPANSION
    assert refusal(bomb) is not None


def test_branches_and_pattern_count() -> None:
    assert not branches(PLAIN)
    assert branches({"anyOf": [{"type": "string"}, {"type": "integer"}]})
    assert pattern_count(PLAIN) == 1
    assert pattern_count({"patternProperties": {"^x": {}, "^y": {"pattern": "z"}}}) == 3


def test_search_uses_re2_and_a_refused_pattern_matches_nothing() -> None:
    assert search("^[A-Z]", "Paris")
    assert not search("^[A-Z]", "paris")
    assert not search("(?=a)a", "a")
