"""repair/reading.py: the keys an arguments object may hold (the tool's own object closed unless it says
otherwise, a nested one open), and the enum values a schema's type allows."""

from __future__ import annotations

from sanctum_proxy.repair.reading import is_type, object_keys, typed_values


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
