"""The proxy's own tools request, whose answer alone may flip a model for every client (no client text in it)."""

from __future__ import annotations

import asyncio

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ProxyError, UpstreamError
from sanctum_proxy.repair.upstream_errors import Verdict, classify
from sanctum_proxy.upstreams.auto_mode import PARSE_FAILURES, ModeBook
from sanctum_proxy.upstreams.chat_rounds import chat
from sanctum_proxy.upstreams.upstream import Upstream

CHECK_TOOL: JSONObject = {"type": "function", "function": {
    "name": "sanctum_check", "description": "Confirms that tools work.",
    "parameters": {"type": "object", "properties": {}}}}


def check_body(model: str) -> JSONObject:
    return {"model": model, "messages": [{"role": "user", "content": "Call sanctum_check now."}],
            "tools": [CHECK_TOOL], "max_tokens": 64, "stream": False}


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
    """A client's round taught `what`: flip the model if the check, sent with `auth`, confirms it (one per pair)."""
    if what == "upstream_parse_failure" and not modes.parse_failure(key, model):
        return
    pair = (key, model)
    if pair in modes.checking:
        return
    modes.checking.add(pair)
    try:
        found = await verdict(upstream, model, timeout, auth)
    finally:
        modes.checking.discard(pair)
    if found == "tools_unsupported":
        modes.settle(key, model, "prompted", "tools_rejected")
    elif found == "upstream_parse_failure":
        modes.settle(key, model, "prompted", PARSE_FAILURES)
    elif what == "upstream_parse_failure":
        modes.forgive(key, model)
