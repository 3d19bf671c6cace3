"""The corpus replayed as upstream streams (1-char, 7-char and whole chunks): the same calls and content as
non-streaming. Every case runs in-process through the streaming sender, the round loop and the SSE writer
(the code path of the proxy, without sockets); one case per corpus file also runs through the real proxy
and the official SDK's stream helper."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import hypothesis
import openai
import orjson
import pytest
from hypothesis import strategies as st

from sanctum_proxy.app import create_app
from sanctum_proxy.codecs.families import opens_bare
from sanctum_proxy.config import load_settings
from sanctum_proxy.core.calls import content_text
from sanctum_proxy.errors import ToolCallParseError
from sanctum_proxy.protocols.chat_events import SseWriter
from sanctum_proxy.repair.events import Answer, ContentDelta, Final, RoundRecord
from sanctum_proxy.repair.loop import run
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.routes import sse
from sanctum_proxy.routes.sse import stream_sender
from tests.codecs.test_corpus import CASES
from tests.conftest import ServerThread
from tests.fakes.upstream import FakeUpstream, Step
from tests.stream_rules import read_stream

SIZES = {"1char": 1, "7char": 7, "whole": None}
RETRY = {"role": "assistant", "content": "Sorry, I cannot do that."}  # the answer to any correction round
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def pieces(text: str, size: int | None) -> list[str]:
    if not text:
        return []
    return [text] if size is None else [text[i:i + size] for i in range(0, len(text), size)]


def upstream_chunks(message: dict[str, Any], finish_reason: str | None,
                    size: int | None) -> list[dict[str, Any]]:
    """A message as a llama.cpp stream: content, then each call's head and its argument fragments.
    Object arguments (Ollama) and `whole` send each call in one chunk."""
    base = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def one(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [one({"role": "assistant", "content": None})]
    out += [one({"content": p}) for p in pieces(content_text(message.get("content")), size)]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        if size is None or not isinstance(function.get("arguments"), str):
            out.append(one({"tool_calls": [{"index": index, **call}]}))
            continue
        head = {"index": index, "id": call.get("id"), "type": "function",
                "function": {"name": function["name"]}}
        out.append(one({"tool_calls": [head]}))
        out += [one({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                for p in pieces(function["arguments"], size)]
    out.append(one({}, finish_reason or "stop"))
    out.append({**base, "choices": [], "usage": USAGE})
    return out


class ScriptedUpstream:
    """`Upstream.chat_stream` and `Upstream.chat` over a list of answers, one per round."""

    def __init__(self, answers: list[tuple[dict[str, Any], str | None]], size: int | None) -> None:
        self.answers, self.size, self.rounds = answers, size, 0

    def next(self) -> tuple[dict[str, Any], str | None]:
        self.rounds += 1
        return self.answers[min(self.rounds, len(self.answers)) - 1]

    @asynccontextmanager
    async def chat_stream(self, body: dict[str, Any], auth: str | None) -> AsyncIterator[AsyncIterator[Any]]:
        message, finish = self.next()

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            for piece in upstream_chunks(message, finish, self.size):
                yield piece

        yield chunks()

    async def plain(self, body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | Answer]:
        message, finish = self.next()
        yield Answer(message, finish, USAGE, {"id": "chatcmpl-up", "model": "m", "created": 1})


@pytest.fixture(autouse=True)
def scripted_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """routes/sse.py opens a stream with `chat_rounds.chat_stream(upstream, ...)`: the scripted upstream answers."""
    real = sse.chat_stream
    monkeypatch.setattr(sse, "chat_stream", lambda upstream, body, auth=None: upstream.chat_stream(body, auth)
                        if isinstance(upstream, ScriptedUpstream) else real(upstream, body, auth))


def plan_for(tools: list[dict[str, Any]]) -> Plan:
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": tools, "stream": True}
    counter = iter(range(1000))
    return Plan(body=body, book=Toolbox.from_tools(tools), mode="native", auto=False, max_rounds=1,
                new_id=lambda: f"call_{next(counter)}")


async def answer_plain(tools: list[dict[str, Any]], case: dict[str, Any]) -> Final:
    upstream = ScriptedUpstream([(case["message"], case.get("finish_reason")), (RETRY, "stop")], None)
    return [e async for e in run(plan_for(tools), upstream.plain) if isinstance(e, Final)][0]


async def answer_streamed(tools: list[dict[str, Any]], case: dict[str, Any], size: int | None) -> bytes:
    upstream = ScriptedUpstream([(case["message"], case.get("finish_reason")), (RETRY, "stop")], size)
    writer = SseWriter({"id": "chatcmpl-x", "created": 1, "model": "m"}, "trace", include_usage=True)
    body = [writer.opening()]
    lead = opens_bare(case.get("format", ""))  # the prompt format the case answers (corpus/README.md)
    try:
        names = Toolbox.from_tools(tools).name_set  # the offered tools, as routes/sse.py passes them
        async for event in run(plan_for(tools), stream_sender(upstream, None, lead=lead, names=names)):
            if not isinstance(event, RoundRecord):  # the trace's (routes/rounds.py)
                body += writer.render(event)
    except ToolCallParseError as exc:
        body += writer.render(exc)
    return b"".join(body)


def calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": c["function"]["name"], "arguments": orjson.loads(c["function"]["arguments"])}
            for c in message.get("tool_calls") or []]


@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
@pytest.mark.parametrize(("tools", "case"), CASES)
async def test_streamed_corpus_case_equals_non_streamed(tools: list[dict[str, Any]], case: dict[str, Any],
                                                         size: int | None) -> None:
    plain = await answer_plain(tools, case)
    got = read_stream(await answer_streamed(tools, case, size))
    assert got.parsed_calls() == calls_of(plain.message), case["note"]
    assert got.finish_reason == plain.finish_reason
    assert got.usage == plain.usage and got.sanctum is not None and got.sanctum["rounds"] == plain.rounds
    assert [o["type"] for o in got.omens] == [o.type for o in plain.omens]
    assert got.reasoning.get("reasoning_content", "") == (plain.message.get("reasoning_content") or "")
    final = plain.message.get("content") or ""
    if plain.rounds == 1:
        assert got.parsed_calls() == case["expect"]["calls"], case["note"]
        assert got.content == final, "streamed content differs from non-streamed"
        return
    # The answer was corrected: round 1 showed at most its prose, never its call text; the accepted
    # answer's content follows it.
    first_round = content_text(case["message"].get("content"))
    assert got.content.endswith(final)
    shown = got.content[:len(got.content) - len(final)].strip()
    assert first_round.lstrip().startswith(shown), f"call text of a rejected round was shown: {shown!r}"


def _one_case_per_file() -> Iterator[Any]:
    seen: set[str] = set()
    for param in CASES:
        family = param.id.split(":")[0]
        tools, case = param.values
        if family not in seen and case["expect"]["calls"] and not case["expect"]["problems"]:
            seen.add(family)
            yield pytest.param(tools, case, id=param.id)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeUpstream, str]]:
    """One fake upstream and one proxy for the module: these tests only queue one answer each."""
    upstream = FakeUpstream()
    with ServerThread(upstream.app()) as up, \
            ServerThread(create_app(load_settings({"upstream": up.url + "/v1"}))) as proxy:
        yield upstream, proxy.url


@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
@pytest.mark.parametrize(("tools", "case"), list(_one_case_per_file()))
def test_corpus_case_through_the_proxy_and_the_sdk_stream_helper(
        servers: tuple[FakeUpstream, str], tools: list[dict[str, Any]], case: dict[str, Any],
        size: int | None) -> None:
    fake, proxy = servers
    fake.steps.clear()
    fake.push(Step(chunks=upstream_chunks(case["message"], case.get("finish_reason"), size)))
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0)
    with sdk.chat.completions.stream(model="m", messages=[{"role": "user", "content": "go"}],
                                     tools=tools) as stream:  # type: ignore[arg-type]
        final = stream.get_final_completion()
    message = final.choices[0].message
    got = [{"name": c.function.name, "arguments": orjson.loads(c.function.arguments)}
           for c in message.tool_calls or []]
    assert got == case["expect"]["calls"], case["note"]
    assert final.choices[0].finish_reason == "tool_calls"
    if "content" in case["expect"]:
        assert (message.content or "").strip() == (case["expect"]["content"] or "")


_PROSE = st.text(alphabet=st.sampled_from(list("ab .,\n\t")), max_size=12)
_HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
_WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(before=_PROSE, after=_PROSE, calls=st.integers(0, 2), size=st.sampled_from([1, 2, 5, None]))
def test_streamed_content_equals_non_streamed_byte_for_byte(before: str, after: str, calls: int,
                                                            size: int | None) -> None:
    """Prose and whitespace of any shape around calls taken out of content: the same content either way."""
    case = {"message": {"role": "assistant", "content": before + _HERMES * calls + after}, "finish_reason": "stop"}
    plain = asyncio.run(answer_plain(_WEATHER, case))
    if plain.rounds != 1:
        return
    got = read_stream(asyncio.run(answer_streamed(_WEATHER, case, size)))
    assert got.content == (plain.message.get("content") or "")
