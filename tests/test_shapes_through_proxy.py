"""The call shapes of issue 30 through the real proxy, streamed and not (the same calls, content and omens either
way): bare JSON with unescaped strings, gpt-oss harmony with its tokens stripped, Granite's bracket-less Python
calls, an unclosed {"type": "function"} wrapper, a call written twice, a name with a harmony token or with its
arguments in it. The corpus files beside them (tests/corpus/unescaped.json, harmony_stripped.json,
bare_pythonic.json, echoes.json) hold the sources; the negatives show that prose of the same look stays text."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.repair.round_body import ESCAPE_HINT
from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import read_stream


def tool(name: str, *props: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in props}, "required": list(props[:1])}}}


TOOLS = [tool("get_weather", "location", "unit"), tool("write_file", "path", "content"), tool("search_web", "query")]
ASK = {"model": "m", "messages": [{"role": "user", "content": "Go."}], "tools": TOOLS}

SHAPES = [  # (id, content, calls, content left, omen types)
    ("unescaped-file-content",
     '{"name": "write_file", "arguments": {"path": "hello.py", "content": "print("hi")\nprint("bye")\n"}}',
     [("write_file", {"path": "hello.py", "content": 'print("hi")\nprint("bye")\n'})], "", ["SpellCallRepaired"]),
    ("harmony-stripped",
     'analysisNeed Paris weather.assistantcommentary to=functions.get_weather json{"location":"Paris"}',
     [("get_weather", {"location": "Paris"})], "analysisNeed Paris weather.", ["SpellCallRepaired"]),
    ("granite-bare-python",
     'get_weather(location="San Francisco", unit="celsius")\nsearch_web(query="vLLM release notes")',
     [("get_weather", {"location": "San Francisco", "unit": "celsius"}),
      ("search_web", {"query": "vLLM release notes"})],
     "", ["SpellCallRepaired", "SpellCallRepaired"]),
    ("granite-after-prose", 'Let me check.\nget_weather(location="Boston")',
     [("get_weather", {"location": "Boston"})], "Let me check.", ["SpellCallRepaired"]),
    ("unclosed-wrapper",
     'On it.\n{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}',
     [("get_weather", {"location": "Paris"})], "On it.", ["SpellCallRepaired"]),
    ("written-twice",
     '<tool_call>{"name": "get_weather", "arguments": {"location": "Paris"}}</tool_call>\n'
     '{"name": "get_weather", "arguments": {"location": "Paris"}}',
     [("get_weather", {"location": "Paris"})], "", ["SpellCallRepaired", "SpellCallsDropped"]),
    # negatives: prose of the same look
    ("prose-python-inline", 'You could run get_weather(location="Paris") yourself.', [],
     'You could run get_weather(location="Paris") yourself.', []),
    ("prose-python-example", 'For example:\nget_weather(location="Paris")\nreturns the forecast.', [],
     'For example:\nget_weather(location="Paris")\nreturns the forecast.', []),
    ("prose-harmony-shape", "A call reads commentary to=functions.get_weather json{...} there.", [],
     "A call reads commentary to=functions.get_weather json{...} there.", []),
    ("prose-json-bare-quotes", 'The log said {"name": "Bob", "msg": "he said "hi""} and stopped.', [],
     'The log said {"name": "Bob", "msg": "he said "hi""} and stopped.', []),
]


def calls_of(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]


@pytest.mark.parametrize(("content", "calls", "left", "omens"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_shape_streamed_and_not(proxy, fake, content, calls, left, omens):
    with httpx.Client(base_url=proxy, timeout=20) as client:
        fake[0].push(Step(body=completion(content)))
        r = client.post("/v1/chat/completions", json=ASK)
    message = r.json()["choices"][0]["message"]
    assert calls_of(message) == calls and (message["content"] or "") == left
    assert [o["type"] for o in r.json()["sanctum"]["omens"]] == omens and r.headers["x-sanctum-rounds"] == "1"
    assert r.json()["choices"][0]["finish_reason"] == ("tool_calls" if calls else "stop")
    for size in (1, 6):
        fake[0].push(Step(chunks=content_chunks(content, size=size)))
        with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as s:
            got = read_stream(s.read())
        assert [(c["name"], orjson.loads(c["arguments"])) for c in got.calls] == calls, size
        assert got.content == left and [o["type"] for o in got.omens] == omens, size


def test_the_duplicate_omen_names_the_call_it_repeats(client, fake):
    text = '{"name": "get_weather", "arguments": {"location": "Paris"}}'
    fake[0].push(Step(body=completion(text, [native_call("get_weather", '{"location":"Paris"}', "call_kept")],
                                      "tool_calls")))
    r = client.post("/v1/chat/completions", json=ASK)
    assert [c["id"] for c in r.json()["choices"][0]["message"]["tool_calls"]] == ["call_kept"]
    omen = r.json()["sanctum"]["omens"][0]
    assert omen["type"] == "SpellCallsDropped" and omen["reason"] == "duplicate_call" and omen["call_id"] == "call_kept"


@pytest.mark.parametrize(("name", "arguments", "mend"), [
    ("get_weather<|channel|>commentary", '{"location": "Paris"}', "name_special_tokens"),
    ('get_weather{"location": "Paris"}', "{}", "arguments_in_name"),
], ids=["channel-suffix", "arguments-in-name"])
def test_native_name_mends_cost_no_round_streamed_and_not(proxy, fake, name, arguments, mend):
    with httpx.Client(base_url=proxy, timeout=20) as client:
        fake[0].push(Step(body=completion(None, [native_call(name, arguments)], "tool_calls")))
        r = client.post("/v1/chat/completions", json=ASK)
    assert calls_of(r.json()["choices"][0]["message"]) == [("get_weather", {"location": "Paris"})]
    assert r.headers["x-sanctum-rounds"] == "1" and mend in r.json()["sanctum"]["omens"][0]["repairs"]
    fake[0].push(Step(chunks=llama_tool_chunks(name, arguments)))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as s:
        got = read_stream(s.read())
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"location": "Paris"}}]
    assert mend in got.omens[0]["repairs"] and got.sanctum["rounds"] == 1


AMBIGUOUS = ('{"name": "write_file", "arguments": {"path": "package.json", "content": "{\n  "name": "app",\n'
             '  "version": "1.0.0"\n}\n"}}')
FIXED = ('<tool_call>{"name": "write_file", "arguments": {"path": "package.json", "content": '
         '"{\\n  \\"name\\": \\"app\\"\\n}\\n"}}</tool_call>')


def test_unescaped_json_that_reads_two_ways_gets_a_correction_round_streamed_and_not(proxy, fake):
    """JSON inside a file's content with its quotes bare: the file's keys or the call's? Never a guess: tier 2,
    with the escaping hint in the correction."""
    for streamed in (False, True):
        first = Step(chunks=content_chunks(AMBIGUOUS, size=5)) if streamed else Step(body=completion(AMBIGUOUS))
        second = Step(chunks=content_chunks(FIXED, size=5)) if streamed else Step(body=completion(FIXED))
        fake[0].push(first, second)
        body = {**ASK, "stream": streamed, "sanctum": {"constrain": "off"}}
        with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as s:
            raw = s.read()
        if streamed:
            got = read_stream(raw)
            calls, omens = got.parsed_calls(), got.omens
        else:
            answer = orjson.loads(raw)
            calls = [{"name": n, "arguments": a} for n, a in calls_of(answer["choices"][0]["message"])]
            omens = answer["sanctum"]["omens"]
        written = {"path": "package.json", "content": '{\n  "name": "app"\n}\n'}
        assert calls == [{"name": "write_file", "arguments": written}]
        assert omens[0]["type"] == "SpellCallRejected" and omens[0]["reason"] == "malformed_json"
        assert ESCAPE_HINT in fake[0].requests[-1]["messages"][-1]["content"]
