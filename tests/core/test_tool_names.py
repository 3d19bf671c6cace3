"""core/tool_names.py: a tool name as a model wrote it maps to the offered one, and names the mends it took; an
unknown or ambiguous name maps to none."""

from __future__ import annotations

from sanctum_proxy.core.tool_names import MAX_NAME_CHARS, resolve_name

NAMES = ("get_weather", "search", "multi_agent_v1__spawn_agent")


def test_an_offered_name_needs_no_mend() -> None:
    assert resolve_name("get_weather", NAMES) == ("get_weather", ())


def test_each_mend_is_named() -> None:
    assert resolve_name(" get_weather\n", NAMES) == ("get_weather", ("name_whitespace",))
    assert resolve_name("functions.get_weather", NAMES) == ("get_weather", ("name_prefix",))
    assert resolve_name("Get_Weather", NAMES) == ("get_weather", ("name_case",))
    assert resolve_name("searchsearch", NAMES) == ("search", ("name_repeated",))
    assert resolve_name("get_weather<|channel|>commentary", NAMES) == ("get_weather", ("name_special_tokens",))
    assert resolve_name("multi_agent_v1.spawn_agent", NAMES) == ("multi_agent_v1__spawn_agent", ("name_namespace",))
    assert resolve_name("spawn_agent", NAMES) == ("multi_agent_v1__spawn_agent", ("name_namespace",))
    assert resolve_name(" functions.Search", NAMES) == ("search", ("name_whitespace", "name_prefix", "name_case"))


def test_unknown_ambiguous_empty_and_overlong_names_map_to_none() -> None:
    assert resolve_name("get_time", NAMES) == (None, ())
    assert resolve_name("SEARCH", ("search", "Search")) == (None, ())
    assert resolve_name("", NAMES) == (None, ())
    assert resolve_name("x" * (MAX_NAME_CHARS + 1), (*NAMES, "x" * (MAX_NAME_CHARS + 1))) == (None, ())
