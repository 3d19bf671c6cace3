"""A request toward Ollama with a `num_ctx` that holds it, or refused naming the sizes.

Only for rounds to Ollama's /api/chat. The current context is the client's, else the Modelfile's, else
`ollama_default_num_ctx`.
"""

from __future__ import annotations

from fastapi import Request

from sanctum_proxy.config import Settings
from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ContextTooLong
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.services import destination, services
from sanctum_proxy.upstreams import capabilities, context_fit
from sanctum_proxy.upstreams.ollama_native import native_options, with_option
from sanctum_proxy.upstreams.ollama_wire import is_ollama
from sanctum_proxy.web.auth import forwarded_key


async def fitted(request: Request, chat: ChatRequest, settings: Settings) -> tuple[ChatRequest, om.Omen | None]:
    """The request with the num_ctx it needs; ContextTooLong where none holds it."""
    options = native_options(chat.body)
    own = options.get("num_ctx")
    own = own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else None
    need = context_fit.need_of(chat.body, options.get("num_predict"))
    if not settings.ollama_native or need.total <= max(own or 0, context_fit.SMALLEST):
        return chat, None
    dest = destination(request)
    upstream = dest.upstream
    backend = next((b for b in upstream.backends if b.healthy), upstream.backends[0])
    auth = forwarded_key(request) if settings.forward_client_key else None
    if not upstream.ollama_native or not await is_ollama(upstream, backend, upstream.headers(auth)):
        return chat, None
    book = services(request).capabilities
    caps = book.cached(dest.key, chat.model) or capabilities.UNKNOWN
    if caps is capabilities.UNKNOWN and settings.probe_capabilities:
        caps = await book.get(dest.key, chat.model, lambda: capabilities.probe(
            upstream, upstream.root_url, chat.model, settings.probe_timeout))
    runs_with = own or caps.num_ctx or settings.ollama_default_num_ctx
    fit = context_fit.fitted(need, runs_with, caps.context_length, settings.ollama_max_num_ctx, chat.model)
    if fit.refused is not None:
        most = min(caps.context_length or settings.ollama_max_num_ctx, settings.ollama_max_num_ctx)
        raise ContextTooLong(need.prompt, most, False, message=fit.refused)
    if fit.num_ctx is None:
        return chat, None
    omen = om.widened(fit.num_ctx, runs_with, need.prompt, need.room)
    return chat.with_body(with_option(chat.body, "num_ctx", fit.num_ctx)), omen
