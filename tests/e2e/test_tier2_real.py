"""Tier 2 on the real llama-server (issue 31): a correction with `tool_choice: "required"` on a tool list that holds a
tool without parameters ends in a valid call, streamed and not; a partly bad parallel answer keeps its valid calls
and the correction round, on the real server under the grammar, fixes the bad one.

The Paris case: SmolLM2 answers "What is the weather in Paris?" in prose; the prompted correction round under
the GBNF grammar once wrote a `get_time` with `city` / `unit` arguments (the grammar gave a tool without
properties any object, validation took none) and the request surrendered. The partly bad answer comes from a
relay in front of the server that scripts the first round (SmolLM2 makes no parallel calls of its own) and passes
every later round, and the /props probe, to the real server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sanctum_proxy.upstreams.embedded import LlamaServer
from tests.conftest import ServerThread
from tests.fakes.upstream import completion, content_chunks
from tests.stream_rules import Streamed, read_stream

pytestmark = pytest.mark.e2e

BOTH = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The current time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "search_web", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]


def ask(proxy: str, stream: bool, **body: Any) -> tuple[int, Streamed]:
    """One request; the answer read the same way streamed or not (calls, omens, error)."""
    payload = {"model": "smollm2", "messages": PARIS, "tools": TOOLS, **body, "stream": stream}
    if stream:
        with httpx.stream("POST", f"{proxy}/v1/chat/completions", json=payload, timeout=600) as response:
            raw = b"".join(response.iter_bytes())
        return response.status_code, read_stream(raw)
    response = httpx.post(f"{proxy}/v1/chat/completions", json=payload, timeout=600)
    got = Streamed()
    data = response.json()
    if response.status_code != 200:
        got.error = data["error"]
        return response.status_code, got
    message = data["choices"][0]["message"]
    got.calls = [{"id": c["id"], "type": c["type"], **c["function"]} for c in message.get("tool_calls") or []]
    got.sanctum, got.omens = data["sanctum"], data["sanctum"]["omens"]
    return response.status_code, got


def valid(call: dict[str, Any]) -> bool:
    arguments = orjson.loads(call["arguments"])
    if call["name"] == "get_time":
        return arguments == {}
    if call["name"] == "get_weather":
        return isinstance(arguments.get("city"), str) and set(arguments) <= {"city", "unit"} and \
            arguments.get("unit", "celsius") in ("celsius", "fahrenheit")
    return call["name"] == "search_web" and set(arguments) == {"query"} and isinstance(arguments["query"], str)


@BOTH
@pytest.mark.parametrize("server", ["llama_jinja", "llama_nojinja"])
def test_the_paris_case_ends_in_a_valid_call(request, proxy_to, server, stream):
    """Default settings, tool_choice required: --jinja (the probe says the template has no tools: prompted, a
    grammar on the correction) and --no-jinja (tools refused: the fallback to prompted)."""
    proxy = proxy_to(request.getfixturevalue(server))
    status, got = ask(proxy, stream, tool_choice="required")
    assert status == 200 and got.error is None, got.error
    assert got.calls and all(valid(c) for c in got.calls), got.calls


# --- a partly bad parallel answer -------------------------------------------------------------------------------

BAD_PARALLEL = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_weather", "arguments": {"city": "London"}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>')


class FirstRoundScripted:
    """A relay to the real llama-server whose first chat round answers BAD_PARALLEL (streamed or not, as asked)."""

    def __init__(self, server: LlamaServer) -> None:
        self.server = server
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/props", self.props, methods=["GET"]),
                                     Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def props(self, request: Request) -> Response:
        async with httpx.AsyncClient() as client:
            reply = await client.get(f"{self.server.root_url}/props", timeout=30)
        return Response(reply.content, reply.status_code, media_type="application/json")

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        if len(self.requests) == 1:
            if body.get("stream"):
                events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in content_chunks(BAD_PARALLEL)]
                return StreamingResponse(iter([*events, b"data: [DONE]\n\n"]), media_type="text/event-stream")
            return JSONResponse(completion(BAD_PARALLEL))
        client = httpx.AsyncClient(timeout=600)
        upstream = await client.send(client.build_request("POST", f"{self.server.base_url}/chat/completions",
                                                          json=body), stream=True)

        async def relay() -> Any:
            try:
                async for piece in upstream.aiter_raw():
                    yield piece
            finally:
                await upstream.aclose()
                await client.aclose()

        return StreamingResponse(relay(), upstream.status_code,
                                 media_type=upstream.headers.get("content-type", "application/json"))


@pytest.fixture
def scripted(llama_jinja: LlamaServer, proxy_to: Any) -> Iterator[tuple[FirstRoundScripted, str]]:
    relay = FirstRoundScripted(llama_jinja)
    with ServerThread(relay.app) as thread:
        yield relay, proxy_to(_AsServer(thread.url), spell_calling="prompted")


class _AsServer:
    """The relay where proxy_to expects a LlamaServer (it reads base_url)."""

    def __init__(self, url: str) -> None:
        self.base_url = f"{url}/v1"


@BOTH
def test_a_partly_bad_parallel_answer_keeps_its_valid_calls_and_the_real_server_fixes_the_bad_one(scripted, stream):
    relay, proxy = scripted
    status, got = ask(proxy, stream)
    assert status == 200 and got.error is None, got.error
    calls = [(c["name"], orjson.loads(c["arguments"])) for c in got.calls]
    assert calls[:2] == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})]
    assert calls[2:] == [("get_time", {})]  # the grammar of the pinned correction round takes only {}
    first, second = relay.requests
    assert "get_time" in second["grammar"] and "get_weather" not in second["grammar"]
    said = second["messages"][-1]["content"]
    assert "(get_weather) are kept" in said and "unexpected argument" in said
    assert [o["spell"] for o in got.omens if o["type"] == "SpellCallRejected"] == ["get_time"]
