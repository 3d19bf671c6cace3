"""The tool book: names map to tools only when unambiguous; argument checks say exactly what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from sanctum_proxy.core.legacy import to_tools
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import coerce, is_type, object_keys, typed_values


def book(parameters: Any = None, name: str = "f", **more: Any) -> Toolbox:
    fn: dict[str, Any] = {"name": name, **more}
    if parameters is not None:
        fn["parameters"] = parameters
    return Toolbox.from_tools([{"type": "function", "function": fn}])


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}


def reasons(b: Toolbox, args: Any) -> list[str]:
    return [p.reason for p in b.check("f", args)]


def test_tools_keep_offered_order_and_first_of_duplicates() -> None:
    b = Toolbox.from_tools([{"type": "function", "function": {"name": n}} for n in ("b", "a", "b")])
    assert b.names == ("b", "a") and list(b.tools) == ["b", "a"]


def test_odd_tool_definitions_are_skipped_without_crashing() -> None:
    b = Toolbox.from_tools(
        [
            None,
            1,
            {},
            {"function": None},
            {"function": {"name": 3}},
            {"function": {"name": "ok", "parameters": "nope", "description": 5}},
        ]
    )
    assert b.names == ("ok",)
    assert Toolbox.from_tools(None).names == ()  # type: ignore[arg-type]


def test_legacy_functions_build_the_same_book() -> None:
    tools = to_tools({"functions": [{"name": "f", "parameters": SCHEMA}]})["tools"]
    assert Toolbox.from_tools(tools).tools["f"].parameters == SCHEMA


def test_restricted_book_holds_only_that_tool() -> None:
    b = Toolbox.from_tools([{"function": {"name": n}} for n in ("a", "b")])
    assert b.restricted_to("b").names == ("b",)
    assert b.restricted_to("zzz").names == ()


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("get_weather", ("get_weather", ())),
        ("GET_WEATHER", ("get_weather", ("name_case",))),
        ("functions.get_weather", ("get_weather", ("name_prefix",))),
        (" get_weather\n", ("get_weather", ("name_whitespace",))),
        ("get_weatherget_weather", ("get_weather", ("name_repeated",))),
        ("weather", (None, ())),
        ("return_ super hero", (None, ())),
    ],
)
def test_resolve_maps_only_lossless_name_differences(written: str, expected: tuple[Any, ...]) -> None:
    b = Toolbox.from_tools([{"function": {"name": n}} for n in ("get_weather", "search")])
    assert b.resolve(written) == expected


def test_resolve_refuses_ambiguous_case() -> None:
    b = Toolbox.from_tools([{"function": {"name": n}} for n in ("Search", "search")])
    assert b.resolve("SEARCH") == (None, ())


def test_valid_arguments_have_no_problems() -> None:
    assert book(SCHEMA).check("f", {"city": "P", "n": 2}) == []


def test_each_reason_is_one_problem_naming_the_argument() -> None:
    problems = book(SCHEMA).check("f", {"n": 0, "town": "x", "zip": 1})
    assert [p.reason for p in problems] == ["missing_arguments", "unexpected_arguments", "invalid_arguments"]
    assert problems[0].details == ("missing required argument 'city'",)
    assert [d.split(":")[0] for d in problems[1].details] == [
        "unexpected argument 'town'",
        "unexpected argument 'zip'",
    ]
    assert "'n'" in problems[2].details[0] and "minimum" in problems[2].details[0]


def test_additional_properties_true_or_schema_allows_extra_arguments() -> None:
    assert reasons(book({**SCHEMA, "additionalProperties": True}), {"city": "P", "x": 1}) == []
    assert reasons(book({**SCHEMA, "additionalProperties": {"type": "string"}}), {"city": "P", "x": 1}) == [
        "invalid_arguments"
    ]


def test_missing_parameters_mean_no_constraints() -> None:
    assert reasons(book(None), {"anything": [1]}) == []


def test_non_object_arguments_are_invalid() -> None:
    assert reasons(book(SCHEMA), [1, 2]) == ["invalid_arguments"]


def test_invalid_schema_does_not_crash_the_check() -> None:
    assert reasons(book({"type": "object", "properties": {"a": {"type": 12}}}), {"a": 1}) == []


def test_validators_are_cached_by_schema_content() -> None:
    assert book(dict(SCHEMA)).validator("f") is book(dict(SCHEMA)).validator("f")


def test_coercion_touches_only_values_that_violate_their_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "string"},
            "c": {"type": ["number", "null"]},
            "d": {"type": "object"},
        },
    }
    value, repairs = coerce({"a": "3", "b": "3", "c": "2.5", "d": "{'k': True}"}, schema)
    assert value == {"a": 3, "b": "3", "c": 2.5, "d": {"k": True}}
    assert set(repairs) >= {"coerced_integer", "coerced_number", "decoded_json_string"}


def test_coercion_does_not_guess() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}}
    assert coerce({"a": "3.0", "b": "yes"}, schema) == ({"a": "3.0", "b": "yes"}, ())
    assert coerce({"a": "03"}, schema) == ({"a": "03"}, ())


def test_nested_values_are_coerced() -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}
    assert coerce({"xs": ["1", "2"]}, schema)[0] == {"xs": [1, 2]}


def test_the_arguments_object_is_closed_unless_it_says_otherwise() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["days", "ghost"]}
    keys = object_keys(schema, top=True)
    assert list(keys.properties) == ["city", "days"]
    assert keys.required == ("days", "ghost")
    assert keys.optional == ["city"]
    assert keys.others is False
    assert object_keys(schema, top=False).others is True
    assert object_keys({**schema, "additionalProperties": True}, top=True).others is True
    assert object_keys({**schema, "additionalProperties": {"type": "number"}}, top=True).others == {"type": "number"}


def test_properties_left_to_subschemas_allow_other_keys() -> None:
    assert object_keys({"type": "object", "anyOf": [{"properties": {"a": {}}}]}, top=True).others is True
    assert object_keys({"type": "object", "properties": {}}, top=True).others is False
    assert object_keys({"patternProperties": {"^x_": {}}}, top=True).patterns == ("^x_",)


def test_enum_values_the_type_contradicts_are_left_out() -> None:
    assert typed_values(["True", "False", "dontcare"], {"type": "boolean"}) == []
    assert typed_values([1, "1", 2.0, True], {"type": "integer"}) == [1, 2.0]
    assert typed_values(["a", None], {"type": ["string", "null"]}) == ["a", None]
    assert typed_values(["a", 1], {}) == ["a", 1]


def test_is_type_follows_json_schema() -> None:
    assert is_type(3.0, "integer") and not is_type(3.5, "integer") and not is_type(True, "integer")
    assert is_type(1, "number") and not is_type(False, "number")
    assert is_type(None, "null") and is_type([], "array") and is_type({}, "object")
    assert not is_type("x", "nonsense")
