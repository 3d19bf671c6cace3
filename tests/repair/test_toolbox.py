"""repair/toolbox.py: the offered tools by name in offered order (the first of a repeated name kept), what their
schemas cost to read, and a call's arguments checked against its tool."""

from __future__ import annotations

from typing import Any

from sanctum_proxy.repair.toolbox import Toolbox


def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_tools_by_name_in_offered_order() -> None:
    book = Toolbox.from_tools([tool("get_weather", WEATHER), {"type": "function"}, "junk",
                               tool("search", {"type": "object"}), tool("get_weather", {"type": "object"})])
    assert book.names == ("get_weather", "search")
    assert book.tools["get_weather"].parameters == WEATHER
    assert len(book) == 2
    assert Toolbox.from_tools(None).names == ()
    assert book.restricted_to("search").names == ("search",)
    assert book.restricted_to("nope").names == ()


def test_names_resolve_as_models_write_them() -> None:
    book = Toolbox.from_tools([tool("get_weather", WEATHER)])
    assert book.resolve("functions.get_weather") == ("get_weather", ("name_prefix",))
    assert book.resolve("get_time") == (None, ())


def test_schema_size_and_branching() -> None:
    plain = Toolbox.from_tools([tool("get_weather", WEATHER)])
    assert not plain.branching
    bigger = Toolbox.from_tools([tool("get_weather", WEATHER), tool("search", {"anyOf": [WEATHER, {}]})])
    assert bigger.branching
    assert bigger.schema_bytes > plain.schema_bytes > 0


def test_check_names_what_is_wrong() -> None:
    book = Toolbox.from_tools([tool("get_weather", WEATHER)])
    assert book.check("get_weather", {"city": "Paris"}) == []
    (problem,) = book.check("get_weather", {})
    assert problem.reason == "missing_arguments"
    assert any("city" in d for d in problem.details)
