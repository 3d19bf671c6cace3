"""The grammar and the validator read a schema alike: every arguments object a grammar allows passes validation
(but for the keywords grammar.NOT_HELD names, which validation alone holds). Grammars are sampled
(tests/gbnf_sampler.py) on generated small schemas, on every tool schema of BFCL and on the tool schemas the
agent clients of tests/clients send (built by each framework's own converter)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.bfcl_ast import to_tool
from sanctum_proxy.repair.grammar import _JSON_RULES, GRAMMAR_FORMATS, NEVER, NOT_HELD, _Rules, _Schema, gbnf
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import typed_values
from tests.gbnf_sampler import Grammar

ROOT = Path(__file__).resolve().parents[2]
# The BFCL data beside the repository (bench/bench_bfcl.py's default), else where this project's machines keep it
BFCL = next((p for p in (ROOT.parent / "shared" / "benchmarks" / "bfcl" / "data",
                         Path("/work/shared/benchmarks/bfcl/data")) if p.is_dir()), ROOT / "absent")
SAMPLE = ROOT / "tests" / "data" / "bfcl_tools.json"  # every 40th BFCL entry's tools, in the repository
SAMPLES = 12



def arguments_gbnf(parameters: Any) -> str:
    """A grammar of one arguments object alone, built by the rules `gbnf` builds a call's arguments with."""
    rules = _Rules()
    arguments = _Schema(rules, parameters).arguments(parameters)
    return f"root ::= {'object' if arguments == NEVER else arguments}\n" + rules.text() + _JSON_RULES


def writable(parameters: Any) -> bool:
    """Whether some arguments object satisfies `parameters` as the grammar reads it."""
    return _Schema(_Rules(), parameters).arguments(parameters) != NEVER


def held(schema: Any) -> Any:
    """`schema` as a grammar holds it: without the NOT_HELD keywords, oneOf read as anyOf."""
    if isinstance(schema, list):
        return [held(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in NOT_HELD:
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: held(s) for name, s in value.items()}
        elif key in ("anyOf", "oneOf", "allOf", "items", "additionalProperties"):
            out["anyOf" if key == "oneOf" else key] = held(value)
        else:
            out[key] = value
    return out


def book_of(parameters: Any, name: str = "t") -> Toolbox:
    return Toolbox.from_tools([{"type": "function", "function": {"name": name, "parameters": parameters}}])


def disagreements(parameters: Any, seed: int, samples: int = SAMPLES) -> list[str]:
    """Arguments the grammar of `parameters` writes that validation refuses, with why."""
    grammar = Grammar(arguments_gbnf(parameters))
    book = book_of(held(parameters))
    rng = random.Random(seed)
    out = []
    for text in [grammar.shortest(), *(grammar.sample(rng) for _ in range(samples))]:
        try:
            args = json.loads(text)
        except ValueError as exc:
            out.append(f"{text!r}: not JSON ({exc})")
            continue
        problems = book.check("t", args)
        if problems:
            out.append(f"{text!r}: {[d for p in problems for d in p.details]}")
    return out


# --- the case: a tool without properties -------------------------------------------------------------

def test_a_tool_without_properties_takes_only_an_empty_object() -> None:
    grammar = Grammar(arguments_gbnf({"type": "object", "properties": {}}))
    rng = random.Random(1)
    assert all(json.loads(grammar.sample(rng)) == {} for _ in range(20))
    assert book_of({"type": "object", "properties": {}}).check("t", {"city": "Paris"})  # validation agrees


def test_an_open_object_and_a_map_take_other_keys() -> None:
    assert "object" in arguments_gbnf({"type": "object", "additionalProperties": True}).split("\n")[0]
    sample = Grammar(arguments_gbnf({"type": "object", "additionalProperties": {"type": "integer"}}))
    rng = random.Random(3)
    values = [v for _ in range(30) for v in json.loads(sample.sample(rng)).values()]
    assert values and all(isinstance(v, int) for v in values)


def test_required_keys_the_properties_do_not_list_are_written() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"],
              "additionalProperties": {"type": "string"}}
    rng = random.Random(5)
    for _ in range(10):
        args = json.loads(Grammar(arguments_gbnf(schema)).sample(rng))
        assert isinstance(args["a"], int) and isinstance(args["b"], str)


def test_enum_values_of_another_type_are_not_written() -> None:
    grammar = arguments_gbnf({"type": "object", "properties": {"n": {"type": "integer", "enum": [1, "2", 3]}},
                              "required": ["n"]})
    assert '"\\"2\\""' not in grammar and not disagreements(json.loads(json.dumps(
        {"type": "object", "properties": {"n": {"type": "integer", "enum": [1, "2", 3]}}, "required": ["n"]})), 1)


def test_optional_properties_grow_the_grammar_linearly() -> None:
    def size(n: int) -> int:
        props = {f"p{i}": {"type": "string"} for i in range(n)}
        return len(arguments_gbnf({"type": "object", "properties": props}))

    small, big = size(20), size(80)
    assert big < 5 * small  # quadratic would be ~16x
    rng = random.Random(2)  # and the grammar still writes any subset, in order
    grammar = Grammar(arguments_gbnf({"type": "object", "properties": {k: {"type": "integer"} for k in "abcd"}}))
    seen = {tuple(json.loads(grammar.sample(rng))) for _ in range(300)}
    assert len(seen) == 16 and all(list(keys) == sorted(keys) for keys in seen)


# --- generated schemas ----------------------------------------------------------------------------------------

names = st.text(alphabet="abcxyz_\"\\é", min_size=1, max_size=4)
scalars = st.sampled_from([{"type": t} for t in ("string", "integer", "number", "boolean", "null")] + [{}])
enums = st.lists(st.one_of(st.text(max_size=4), st.integers(-5, 5), st.booleans(), st.none()), min_size=1,
                 max_size=4, unique_by=lambda v: json.dumps(v)).map(lambda vs: {"enum": vs})
typed_enums = st.one_of(  # one value at least of the type (an enum contradicting its type takes nothing)
    st.tuples(st.text(max_size=3), enums).map(lambda p: {"type": "string", "enum": [p[0], *p[1]["enum"]]}),
    st.tuples(st.integers(), enums).map(lambda p: {"type": "integer", "enum": [p[0], *p[1]["enum"]]}))
consts = st.one_of(st.text(max_size=4), st.integers()).map(lambda v: {"const": v})


def containers(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.builds(_object, st.dictionaries(names, inner, max_size=4), st.data(),
                        st.sampled_from(["absent", True, False, "schema"]), inner)
    arrays = st.builds(_array, inner, st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.integers(0, 3)))
    unions = st.lists(inner, min_size=1, max_size=3).map(lambda branches: {"anyOf": branches})
    type_lists = st.lists(st.sampled_from(["string", "integer", "null", "boolean"]), min_size=1, max_size=3,
                          unique=True).map(lambda ts: {"type": ts})
    return objects | arrays | unions | type_lists


def _object(props: dict[str, Any], data: st.DataObject, others: Any, extra: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    keys = list(props)
    required = data.draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
    if required:
        out["required"] = required
    if others != "absent":
        out["additionalProperties"] = extra if others == "schema" else others
    return out


def _array(items: dict[str, Any], least: int | None, most: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": items}
    if least is not None:
        out["minItems"] = least
    if most is not None and (least is None or most >= least):
        out["maxItems"] = most
    return out


schemas = st.recursive(scalars | enums | typed_enums | consts, containers, max_leaves=8)
tool_schemas = st.builds(_object, st.dictionaries(names, schemas, max_size=5), st.data(),
                         st.sampled_from(["absent", True, False, "schema"]), schemas)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_schemas, st.integers(0, 2**16))
def test_whatever_the_grammar_writes_validates_on_generated_schemas(schema: dict[str, Any], seed: int) -> None:
    if writable(schema):  # (an enum of another type than its own, required: nothing is valid)
        assert not disagreements(schema, seed, samples=6), schema


# --- BFCL and the agent clients' tool schemas -----------------------------------------------------------------

def bfcl_schemas() -> list[dict[str, Any]]:
    seen: dict[bytes, dict[str, Any]] = {}
    for path in sorted(BFCL.glob("BFCL_v4_*.json")):
        for line in path.read_text().splitlines():
            for function in json.loads(line)["function"]:
                parameters = to_tool(function)["function"]["parameters"]
                seen.setdefault(orjson.dumps(parameters, option=orjson.OPT_SORT_KEYS), parameters)
    return list(seen.values())


def test_whatever_the_grammar_writes_validates_on_the_bfcl_sample() -> None:
    tools = [tool for entry in json.loads(SAMPLE.read_text()) for tool in entry["tools"]]
    assert len(tools) > 40
    for index, tool in enumerate(tools):
        assert not disagreements(tool["function"]["parameters"], index, samples=10), tool


@pytest.mark.skipif(not BFCL.is_dir(), reason="the BFCL data is not on this machine")
def test_whatever_the_grammar_writes_validates_on_every_bfcl_schema() -> None:
    schemas = bfcl_schemas()
    assert len(schemas) > 1000
    failed, unwritable = {}, []
    for index, schema in enumerate(schemas):
        if not writable(schema):
            unwritable.append(schema)
            continue
        problems = disagreements(schema, index, samples=3)
        if problems:
            failed[json.dumps(schema)[:300]] = problems[:2]
    assert not failed, f"{len(failed)} of {len(schemas)}: " + json.dumps(dict(list(failed.items())[:3]), indent=1)
    # A few BFCL tools no arguments satisfy: a required argument whose enum contradicts its type
    # ({"type": "integer", "enum": ["1", ..., "9"]}, {"type": "array", "enum": ["Weather", ...]}); gbnf leaves
    # them out of a call grammar
    assert len(unwritable) <= 5 and all(any(_contradicts(s) for s in schema["properties"].values())
                                        for schema in unwritable)


def _contradicts(schema: dict[str, Any]) -> bool:
    return bool(schema.get("enum")) and not typed_values(schema["enum"], schema)


def get_weather(city: str, unit: str = "celsius", days: int | None = None) -> str:
    """The weather of a city.

    Args:
        city: the city
        unit: celsius or fahrenheit
        days: how many days ahead
    """
    return city


def get_time() -> str:
    """The time now."""
    return ""


def client_schemas() -> dict[str, dict[str, Any]]:
    """Arguments schemas as the agent frameworks of tests/clients write them, for the tools those tests give them
    (get_weather(city)), a richer one, a tool without parameters and the structured-output tools."""
    import pydantic

    class Report(pydantic.BaseModel):
        summary: str

    out: dict[str, dict[str, Any]] = {}
    functions = {"get_weather": get_weather, "get_time": get_time}
    try:
        from langchain_core.tools import tool as lc_tool
        from langchain_core.utils.function_calling import convert_to_openai_tool
        for name, fn in functions.items():
            out[f"langchain {name}"] = convert_to_openai_tool(lc_tool(fn))["function"]["parameters"]
        out["langchain Report"] = convert_to_openai_tool(Report)["function"]["parameters"]
    except ImportError:
        pass
    try:
        import agents
        for name, fn in functions.items():
            out[f"openai-agents {name}"] = agents.function_tool(fn).params_json_schema
        out["openai-agents Report"] = agents.AgentOutputSchema(Report).json_schema()
    except ImportError:
        pass
    try:
        from pydantic_ai import Tool
        for name, fn in functions.items():
            out[f"pydantic-ai {name}"] = Tool(fn).function_schema.json_schema
    except ImportError:
        pass
    try:
        import smolagents
        from smolagents.models import get_tool_json_schema
        for name, fn in functions.items():
            out[f"smolagents {name}"] = get_tool_json_schema(smolagents.tool(fn))["function"]["parameters"]
        out["smolagents final_answer"] = get_tool_json_schema(smolagents.FinalAnswerTool())["function"]["parameters"]
    except ImportError:
        pass
    return out


@pytest.fixture(scope="module")
def clients() -> dict[str, dict[str, Any]]:
    return client_schemas()  # imported when used: the frameworks take seconds to import


def test_whatever_the_grammar_writes_validates_on_the_clients_tool_schemas(clients: dict[str, Any]) -> None:
    missing = {"langchain", "openai-agents", "pydantic-ai", "smolagents"} - {name.split()[0] for name in clients}
    if missing:  # the frameworks come from tests/clients/requirements.txt, which .ci/run installs
        pytest.skip(f"not installed: {', '.join(sorted(missing))} (pip install -r tests/clients/requirements.txt)")
    failed = {name: problems for name, schema in clients.items() if (problems := disagreements(schema, 7, 40))}
    assert not failed


def test_the_clients_tools_without_parameters_take_only_an_empty_object(clients: dict[str, Any]) -> None:
    for name, schema in clients.items():
        if name.endswith("get_time"):
            rng = random.Random(0)
            assert all(json.loads(Grammar(arguments_gbnf(schema)).sample(rng)) == {} for _ in range(10)), name


# --- the whole call, in each format with a grammar ------------------------------------------------------------

PARIS_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "search_web", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]


@pytest.mark.parametrize("fmt", sorted(GRAMMAR_FORMATS))
def test_every_call_the_grammar_writes_passes_tier_one(fmt: str) -> None:
    book = Toolbox.from_tools(PARIS_TOOLS)
    grammar = gbnf(book, fmt, text=False, parallel=True)
    assert grammar is not None
    sampler = Grammar(grammar)
    rng = random.Random(11)
    for _ in range(60):
        text = sampler.sample(rng)
        assessment = assess({"role": "assistant", "content": text}, book, finish_reason="stop", asked_format=fmt)
        assert assessment.calls and not assessment.problems, (text, assessment.problems)
        for call in assessment.calls:
            if call.name == "get_time":
                assert json.loads(call.arguments) == {}


def test_the_sampler_reads_the_grammar_it_is_given() -> None:
    """The sampler itself: a class, a bounded repetition and an alternative with an empty option."""
    grammar = Grammar('root ::= "a" [0-2]{2,3} x\nx ::= | "!"\n')
    rng = random.Random(0)
    seen = {grammar.sample(rng) for _ in range(200)}
    assert all(re.fullmatch(r"a[0-2]{2,3}!?", s) for s in seen) and len(seen) > 20
    assert grammar.shortest() == "a00"
