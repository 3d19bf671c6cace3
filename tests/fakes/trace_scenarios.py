"""Three requests the traces, the metrics and the viewer must each tell apart: one mended locally (a trailing
comma), one bounced once (an unknown tool, then a valid call) and one given up on (three unknown tools).
The bounced ones ask for the conversational tier (constrain off): this fake answers without a grammar, and a
constrained correction round would be sent without the rejected turn the traces and the viewer show."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.fakes.upstream import FakeUpstream, Step, completion, native_call

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
       "tool_choice": "auto"}
TRAILING_COMMA = '{"city": "Paris", "days": 3,}'
CONVERSATIONAL = {"X-Sanctum-Constrain": "off"}


def calls(name: str, arguments: str) -> Step:
    return Step(body=completion(None, [native_call(name, arguments)], "tool_calls"))


def repaired(upstream: FakeUpstream, url: str, **headers: str) -> httpx.Response:
    upstream.push(calls("get_weather", TRAILING_COMMA))
    return ask(url, headers)


def bounced(upstream: FakeUpstream, url: str, **headers: str) -> httpx.Response:
    upstream.push(calls("lookup_weather", '{"city": "Paris"}'), calls("get_weather", '{"city": "Paris"}'))
    return ask(url, {**CONVERSATIONAL, **headers})


def surrendered(upstream: FakeUpstream, url: str, **headers: str) -> httpx.Response:
    for city in ("Paris", "Lyon", "Nice"):
        upstream.push(calls("nope", orjson.dumps({"city": city}).decode()))
    return ask(url, {**CONVERSATIONAL, **headers})


def ask(url: str, headers: dict[str, Any], body: dict[str, Any] = ASK) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=20)
