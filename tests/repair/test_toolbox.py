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


def test_the_same_tools_give_the_same_toolbox_and_its_validators_once() -> None:
    tools = [tool("get_weather", WEATHER), tool("search", {"type": "object"})]
    book = Toolbox.of(tools)
    assert Toolbox.of([tool("get_weather", WEATHER), tool("search", {"type": "object"})]) is book
    assert Toolbox.of([tool("get_weather", WEATHER)]) is not book
    assert book.validator("get_weather") is book.validator("get_weather")
    assert book.check("get_weather", {"city": 3})  # the cached one still judges


def test_toolboxes_kept_are_bounded() -> None:
    from sanctum_proxy.repair import toolbox

    first = Toolbox.of([tool("t0", WEATHER)])
    for i in range(1, toolbox.BOOKS_KEPT + 1):
        Toolbox.of([tool(f"t{i}", WEATHER)])
    assert len(toolbox._BOOKS) <= toolbox.BOOKS_KEPT
    assert Toolbox.of([tool("t0", WEATHER)]) is not first  # the least recently used went first
