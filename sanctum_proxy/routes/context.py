"""A request held against the model's context window, refused with `ContextTooLong` naming both sizes.

Ollama silently drops a prompt's start past its context, so its `num_ctx` is raised to hold the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ContextTooLong, UpstreamError
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.repair.loop_data import Plan, Sender
from sanctum_proxy.repair.upstream_errors import context_exceeded
from sanctum_proxy.services import Services
from sanctum_proxy.upstreams import capabilities, tokens
from sanctum_proxy.upstreams.ollama_native import native_options, with_option
from sanctum_proxy.upstreams.ollama_wire import is_ollama
from sanctum_proxy.upstreams.pools import Destination

DEFAULT_ROOM = 1024  # answer tokens where the request names no limit
MAX_ROOM = 4096  # Claude Code asks for 32000 and more
SMALLEST = 2048  # fits every context Ollama runs a model with


@dataclass(frozen=True)
class Need:

    prompt: int
    room: int

    @property
    def total(self) -> int:
        return self.prompt + self.room


@dataclass(frozen=True)
class Fit:
    """num_ctx None: the current context fits."""

    need: Need
    runs_with: int
    num_ctx: int | None = None
    refused: str | None = None


def need_of(body: JSONObject, limit: object) -> Need:
    """`limit`: the answer token limit the request names."""
    room = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else DEFAULT_ROOM
    return Need(tokens.estimate(body), min(room, MAX_ROOM))


def num_ctx_fit(need: Need, runs_with: int, trained: int | None, cap: int, model: str) -> Fit:
    """The next power of two that holds `need`, within the model's limit and `cap`, never lowered."""
    if need.total <= runs_with:
        return Fit(need, runs_with)
    most = min(trained, cap) if trained else cap
    if need.prompt > most:
        why = f"its trained context is {trained} tokens" if trained and trained <= cap else \
            f"ollama_max_num_ctx is {cap}"
        return Fit(need, runs_with, refused=(
            f"the request is about {need.prompt} tokens, more than model {model!r} can take ({why}; it would run "
            f"with {runs_with}): shorten the conversation or the tools"))
    size = min(1 << (need.total - 1).bit_length(), most)
    return Fit(need, runs_with, num_ctx=size) if size > runs_with else Fit(need, runs_with)


async def ollama_fitted(state: Services, dest: Destination, chat: ChatRequest,
                        auth: str | None) -> tuple[ChatRequest, om.Omen | None]:
    """The request with the num_ctx it needs toward Ollama's /api/chat."""
    options = native_options(chat.body)
    own = options.get("num_ctx")
    own = own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else None
    settings, upstream = state.settings, dest.upstream
    backend = next((b for b in upstream.backends if b.healthy), upstream.backends[0])
    if not settings.ollama_native or not upstream.ollama_native or backend.ollama is False:
        return chat, None  # the estimate below encodes the whole prompt: only toward Ollama
    need = need_of(chat.body, options.get("num_predict"))
    if need.total <= max(own or 0, SMALLEST):
        return chat, None
    if not await is_ollama(upstream, backend, upstream.headers(auth)):
        return chat, None
    book = state.capabilities
    caps = book.cached(dest.key, chat.model) or capabilities.UNKNOWN
    if caps is capabilities.UNKNOWN and settings.probe_capabilities:
        caps = await book.get(dest.key, chat.model, lambda: capabilities.probe(
            upstream, upstream.root_url, chat.model, settings.probe_timeout, auth))
    runs_with = own or caps.num_ctx or settings.ollama_default_num_ctx
    fit = num_ctx_fit(need, runs_with, caps.context_length, settings.ollama_max_num_ctx, chat.model)
    if fit.refused is not None:
        most = min(caps.context_length or settings.ollama_max_num_ctx, settings.ollama_max_num_ctx)
        raise ContextTooLong(need.prompt, most, False, message=fit.refused)
    if fit.num_ctx is None:
        return chat, None
    omen = om.widened(fit.num_ctx, runs_with, need.prompt, need.room)
    return chat.with_body(with_option(chat.body, "num_ctx", fit.num_ctx)), omen


def first_round_checked(state: Services, dest: Destination, plan: Plan, send: Sender, auth: str | None) -> Sender:
    """`send` with its first round checked against the probed context."""
    caps = state.capabilities.cached(plan.upstream, str(plan.body.get("model", "")))
    return checked(send, dest.upstream, dest.upstream.root_url, caps.context if caps is not None else None,
                   state.settings.probe_timeout, auth)


def checked(send: Sender, upstream: tokens.JsonProber, root_url: str, context: int | None,
            timeout: float, client_auth: str | None = None) -> Sender:
    """`context` None: only the upstream's refusal is read."""
    first = True

    async def send_checked(body: JSONObject, live: bool) -> AsyncIterator[Any]:
        nonlocal first
        checking, first = first, False
        if checking and context is not None and tokens.estimate(body) > context:
            counted, exact = await tokens.count(upstream, root_url, body, timeout, client_auth)
            if exact and counted > context:
                raise ContextTooLong(counted, context, True)
        try:
            async for event in send(body, live):
                yield event
        except UpstreamError as error:
            refused = from_refusal(error, context, body) if checking else None
            if refused is None:
                raise
            raise refused from error

    return send_checked


def from_refusal(error: UpstreamError, context: int | None, sent: JSONObject) -> ContextTooLong | None:
    """The upstream's refusal with its own sizes where it gives them."""
    if not context_exceeded(error, sent):
        return None
    fields = error.extra()
    prompt, size = _count(fields.get("n_prompt_tokens")), _count(fields.get("n_ctx")) or context
    if size is None:
        return None
    return ContextTooLong(prompt or tokens.estimate(sent), size, prompt is not None)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
