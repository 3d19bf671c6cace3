"""A lesson one client's round taught about a model, kept for every client only when the proxy's own request (no
client text in it) meets it too. The checks run in the background: the client's round goes on at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Hashable
from dataclasses import dataclass
from typing import Any

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ProxyError, UpstreamError
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.grammar import gbnf
from sanctum_proxy.repair.loop_data import Lesson, Plan
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.upstream_errors import Verdict, classify
from sanctum_proxy.upstreams.auto_mode import PARSE_FAILURES, ModeBook
from sanctum_proxy.upstreams.capabilities import CapabilityBook
from sanctum_proxy.upstreams.chat_rounds import chat
from sanctum_proxy.upstreams.upstream import Upstream

MODE_LESSONS = ("tools_rejected", "upstream_parse_failure")

log = logging.getLogger("sanctum_proxy")


@dataclass(frozen=True)
class Lessons:
    """Where a round's lessons go: the books they are kept in, once the proxy's own request meets them too."""

    modes: ModeBook
    capabilities: CapabilityBook
    timeout: float  # probe_timeout

    def keep(self, upstream: Upstream, plan: Plan, lesson: Lesson, auth: str | None) -> None:
        """Check the lesson in the background, one check at a time per (upstream, model) for a mode lesson and per
        (upstream, model, lesson) for a refused constraint; the client's round has already gone prompted or
        unconstrained."""
        key, model = plan.upstream, plan.model
        if lesson.what not in MODE_LESSONS:
            start(self.capabilities, upstream, key, model, lesson, plan.prompt_format, auth, self.timeout)
        elif lesson.what != "upstream_parse_failure" or self.modes.parse_failure(key, model):
            _spawn(self.modes.checking, (key, model),
                   learned(self.modes, upstream, key, model, lesson.what, self.timeout, auth))

    async def aclose(self) -> None:
        """Cancel the checks still running (the server stops)."""
        running = [*self.modes.checking.values(), *self.capabilities.checking.values()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def _spawn(checking: dict[Any, asyncio.Task[None]], pair: Hashable, check: Coroutine[Any, Any, None]) -> None:
    """Run `check` unless one for `pair` runs; held in `checking` until it ends, a failure logged with its pair."""
    if pair in checking:
        check.close()
        return
    task = checking[pair] = asyncio.get_running_loop().create_task(check)

    def ended(done: asyncio.Task[None]) -> None:
        checking.pop(pair, None)
        if not done.cancelled() and done.exception() is not None:
            log.error("the check of %s failed", pair, exc_info=done.exception())

    task.add_done_callback(ended)


# Tools rejected, or a call dropped by the upstream's parser: a flip to prompted.

CHECK_TOOL: JSONObject = {"type": "function", "function": {
    "name": "sanctum_check", "description": "Confirms that tools work.",
    "parameters": {"type": "object", "properties": {}}}}


def check_body(model: str) -> JSONObject:
    return {**_asking(model), "tools": [CHECK_TOOL]}


def _asking(model: str) -> JSONObject:
    """The check's request without its tools or constraint: no client text in it."""
    return {"model": model, "messages": [{"role": "user", "content": "Call sanctum_check now."}],
            "max_tokens": 64, "stream": False}


async def verdict(upstream: Upstream, model: str, timeout: float, auth: str | None = None) -> Verdict | None:
    """None: tools work, or no answer; `auth`: the client's key, where forwarded."""
    body = check_body(model)
    try:
        async with asyncio.timeout(timeout):
            reply = await chat(upstream, body, auth)
    except UpstreamError as error:
        return classify(error, body)
    except (TimeoutError, ProxyError):
        return None
    return "upstream_parse_failure" if _empty(reply.body) else None


def _empty(answer: object) -> bool:
    """Ollama's answer when its parser drops a call."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    if not isinstance(message, dict) or choice.get("finish_reason") == "length":
        return False
    content = message.get("content")
    return not message.get("tool_calls") and not (isinstance(content, str) and content.strip())


async def learned(modes: ModeBook, upstream: Upstream, key: str, model: str, what: str, timeout: float,
                  auth: str | None = None) -> None:
    """A client's round taught `what`: flip the model if the check, sent with `auth`, confirms it."""
    found = await verdict(upstream, model, timeout, auth)
    if found == "tools_unsupported":
        modes.settle(key, model, "prompted", "tools_rejected")
    elif found == "upstream_parse_failure":
        modes.settle(key, model, "prompted", PARSE_FAILURES)
    elif what == "upstream_parse_failure":
        modes.forgive(key, model)


# A refused constraint (tool_choice, a grammar, a schema): constraining stops.


def check_of(lesson: Lesson, model: str, prompt_format: str) -> JSONObject:
    """The refused kind of constraint, on the check tool alone."""
    if lesson.how == "tool_choice":
        return {**check_body(model), "tool_choice": "required"}
    book = Toolbox.of([CHECK_TOOL])
    body = _asking(model)
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
        _spawn(book.checking, pair,
               _learned(book, upstream, key, model, lesson, check_of(lesson, model, prompt_format), auth, timeout))


async def _learned(book: CapabilityBook, upstream: Upstream, key: str, model: str, lesson: Lesson,
                   body: JSONObject, auth: str | None, timeout: float) -> None:
    """Record the refusal if the check meets it, within `probes_per_minute`."""
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
