"""Fuzzing the stream side and prompted mode: the Assembler under random chunkings, the upstream SSE
reader under random byte splits, and the prompted rewriting of arbitrary bodies. Zero crashes; chunking
never changes the result; what is shown live is always a prefix of the content and never call markup.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from sanctum_proxy.codecs import families
from sanctum_proxy.errors import InvalidRequest, ProxyError
from sanctum_proxy.protocols.chat_request import check_messages
from sanctum_proxy.repair import prompted
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.streaming import Assembler
from sanctum_proxy.upstreams.answer_bytes import sse_data
from tests.codecs.test_fuzz_parsers import BOOK, SCHEMAS, json_values, messy, names


def cuts(text: str, points: list[int]) -> list[str]:
    marks = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in zip(marks, marks[1:], strict=False)]


def content_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def fed(pieces: list[str]) -> tuple[Assembler, str]:
    a = Assembler()
    shown = "".join(a.feed(content_chunk(p)) for p in pieces)
    a.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return a, shown


@given(messy, st.lists(st.integers(0, 10_000), max_size=12))
def test_any_chunking_gives_the_same_answer_and_calls(text: str, points: list[int]) -> None:
    whole, _ = fed([text])
    split, shown = fed(cuts(text, points))
    assert split.content == whole.content == text
    assert text.startswith(shown)
    calls = assess(split.message(), BOOK, finish_reason="stop")
    again = assess({"role": "assistant", "content": text}, BOOK, finish_reason="stop")
    assert [(c.name, c.arguments) for c in calls.calls] == [(c.name, c.arguments) for c in again.calls]


@given(messy, st.lists(st.integers(0, 10_000), max_size=12))
def test_live_text_never_contains_a_call_the_answer_holds(text: str, points: list[int]) -> None:
    _, shown = fed(cuts(text, points))
    for found in assess({"content": text}, BOOK).calls:
        assert found.arguments not in shown or found.arguments in ("{}",)


@given(st.lists(st.fixed_dictionaries({
    "index": st.one_of(st.integers(-2, 4), st.none(), st.text(max_size=2)),
    "id": st.one_of(st.none(), st.text(max_size=4)),
    "function": st.fixed_dictionaries({}, optional={
        "name": st.one_of(names, st.none()), "arguments": st.one_of(st.text(max_size=10), json_values)}),
}), max_size=8), st.lists(json_values, max_size=4))
def test_any_tool_call_deltas_or_junk_chunks_are_assembled_without_crashing(deltas: list[Any],
                                                                            junk: list[Any]) -> None:
    a = Assembler()
    for d in deltas:
        a.feed({"choices": [{"index": 0, "delta": {"tool_calls": [d]}}]})
    for j in junk:
        a.feed(j if isinstance(j, dict) else {"choices": [j]})
    assess(a.message(), BOOK)


async def _gather(pieces: list[bytes]) -> list[bytes] | str:
    async def source() -> AsyncIterator[bytes]:
        for p in pieces:
            yield p

    try:
        return [e async for e in sse_data(source(), limit=1 << 20, idle=60)]
    except ProxyError as exc:
        return type(exc).__name__


events = st.lists(st.one_of(
    json_values.map(lambda v: b"data: " + json.dumps(v).encode() + b"\n\n"),
    st.sampled_from([b": keep-alive\n\n", b"data: [DONE]\n\n", b"event: x\ndata: 1\n\n", b"\r\n",
                     b"data:no-space\r\n\r\n", b"id: 3\n", b"data: a\ndata: b\n\n"]),
    st.binary(max_size=12)), max_size=12).map(b"".join)


@given(events, st.lists(st.integers(0, 10_000), max_size=16))
def test_sse_reader_is_independent_of_how_bytes_are_split(body: bytes, points: list[int]) -> None:
    marks = sorted({p % (len(body) + 1) for p in points} | {0, len(body)})
    split = [body[a:b] for a, b in zip(marks, marks[1:], strict=False)]
    assert asyncio.run(_gather(split)) == asyncio.run(_gather([body]))


messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(
    ["system", "developer", "user", "assistant", "tool", "function", "other"])}, optional={
    "content": st.one_of(st.none(), st.text(max_size=10), st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=5)}), max_size=2),
        json_values),
    "tool_calls": st.one_of(json_values, st.lists(st.fixed_dictionaries({
        "id": st.text(max_size=4), "function": st.fixed_dictionaries({"name": names, "arguments": st.one_of(
            st.text(max_size=10), json_values)})}), max_size=2)),
    "tool_call_id": st.text(max_size=4), "name": st.text(max_size=4),
    "function_call": st.fixed_dictionaries({"name": names, "arguments": st.text(max_size=8)}),
}), max_size=6)


@given(messages, st.sampled_from(families.FORMAT_NAMES), st.booleans(), st.sampled_from([None, "any", "search"]))
def test_prompted_rewrites_any_history_into_text_only(history: list[dict[str, Any]], fmt: str, parallel: bool,
                                                     required: str | None) -> None:
    """Any history the request parser lets through (the rest is a 400 there)."""
    try:
        check_messages(history)
    except InvalidRequest:
        assume(False)
    body = {"model": "m", "messages": history, "tools": [], "tool_choice": "auto"}
    out = prompted.to_prompted(body, BOOK, fmt, parallel=parallel, required=required)
    assert not set(out) & set(prompted.STRIPPED)
    for message in out["messages"]:
        assert "tool_calls" not in message and message.get("role") not in ("tool", "function")
    json.dumps(out)


@given(st.sampled_from(sorted(SCHEMAS)), st.dictionaries(st.text(max_size=6), json_values, max_size=4),
       st.sampled_from(families.FORMAT_NAMES))
def test_prompted_call_text_reads_back_as_the_same_call(name: str, args: dict[str, Any], fmt: str) -> None:
    text = families.render_call(fmt, name, args)
    out = assess({"content": text}, BOOK)
    if out.calls:  # accepted: exactly what was written (or its lossless coercion, then valid)
        assert [c.name for c in out.calls] == [name]
    else:
        assert out.problems


# --- issue 18: the constrained text branch and pass-through paths ------------------------------------------


@given(st.lists(st.sampled_from(["a", "b", " ", "é", "🙂", '\\"', "\\\\", "\\n", "\\u00e9", "\\ud83d\\ude00",
                                 "\\/", "\\t"]), max_size=40),
       st.lists(st.integers(0, 10_000), max_size=12), st.booleans())
def test_constrained_text_branch_is_independent_of_chunking(tokens: list[str], points: list[int],
                                                            closed: bool) -> None:
    from sanctum_proxy.repair import constrain

    raw = '{"content": "' + "".join(tokens) + ('"}' if closed else "")
    a = Assembler(text_branch=True)
    shown = "".join(a.feed(content_chunk(p)) for p in cuts(raw, points))
    assert shown == constrain.visible_text(raw)


@given(st.lists(st.sampled_from(["a", ".", "..", "%2e", "%2E", "%252e", "%2f", "%2F", "%5c", "\\", "/", "%25",
                                 "models", "%00", "%2525"]), min_size=1, max_size=8))
def test_a_pass_through_path_the_proxy_accepts_stays_under_v1(parts: list[str]) -> None:
    """Whatever the client writes, a path check_path lets through resolves under /v1/ as the upstream
    client (yarl, as aiohttp sends it) and any server that decodes and normalises would see it."""
    import posixpath
    from urllib.parse import unquote

    from starlette.requests import Request
    from yarl import URL

    from sanctum_proxy.routes.passthrough import check_path

    raw = "/v1/" + "".join(parts)
    scope = {"type": "http", "method": "GET", "path": unquote(raw), "raw_path": raw.encode(), "headers": [],
             "query_string": b"", "server": ("x", 80), "scheme": "http", "root_path": ""}
    try:
        check_path(Request(scope))
    except ProxyError:
        return
    sent = URL("http://up/v1" + "/" + unquote(raw).removeprefix("/v1/"))
    decoded = sent.path
    for _ in range(4):
        decoded = unquote(decoded)
    assert posixpath.normpath(decoded).startswith("/v1") and sent.path.startswith("/v1/")
