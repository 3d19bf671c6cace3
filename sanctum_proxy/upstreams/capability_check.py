"""The proxy's own constrained request, whose refusal alone stops constraining a model for every client."""

from __future__ import annotations

import asyncio

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ProxyError, UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.grammar import gbnf
from sanctum_proxy.repair.loop_data import Lesson
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.upstreams.capabilities import CapabilityBook
from sanctum_proxy.upstreams.chat_rounds import chat
from sanctum_proxy.upstreams.mode_check import CHECK_TOOL, check_body
from sanctum_proxy.upstreams.upstream import Upstream


def check_of(lesson: Lesson, model: str, prompt_format: str) -> JSONObject:
    """The refused kind of constraint, on the check tool alone."""
    if lesson.how == "tool_choice":
        return {**check_body(model), "tool_choice": "required"}
    book = Toolbox.of([CHECK_TOOL])
    body: JSONObject = {"model": model, "messages": [{"role": "user", "content": "Call sanctum_check now."}],
                        "max_tokens": 64, "stream": False}
    grammar = gbnf(book, prompt_format, text=False, parallel=False) if lesson.how == "grammar" else None
    if grammar is not None:
        body["grammar"] = grammar
    else:
        body["response_format"] = cn.response_format(cn.answer_schema(book, text=False, parallel=False))
    return body


def refused(lesson: Lesson, error: UpstreamError) -> bool:
    """Whether the check met the client's refusal."""
    return cn.tool_choice_refused(error) if lesson.what == "tool_choice_refused" else cn.schema_refused(error)


def start(book: CapabilityBook, upstream: Upstream, key: str, model: str, lesson: Lesson, prompt_format: str,
          auth: str | None, timeout: float) -> None:
    """Check `lesson` in the background, one per pair and lesson: the client's round goes on unconstrained."""
    pair = (key, model, lesson.what)
    if pair not in book.checking:
        book.checking[pair] = asyncio.get_running_loop().create_task(
            _learned(book, upstream, key, model, lesson, check_of(lesson, model, prompt_format), auth, timeout))


async def _learned(book: CapabilityBook, upstream: Upstream, key: str, model: str, lesson: Lesson,
                   body: JSONObject, auth: str | None, timeout: float) -> None:
    """Record the refusal if the check meets it, within `probes_per_minute`."""
    try:
        if not await book.may_probe_now():
            return
        try:
            async with asyncio.timeout(timeout):
                await chat(upstream, body, auth)
        except UpstreamError as error:
            if not refused(lesson, error):
                return
            if lesson.what == "tool_choice_refused":
                book.refuse_tool_choice(key, model)
            else:
                book.refuse_schema(key, model)
        except (TimeoutError, ProxyError):
            return
    finally:
        book.checking.pop((key, model, lesson.what), None)
