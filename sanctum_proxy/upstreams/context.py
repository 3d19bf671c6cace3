"""Whether a request's first round fits the model's context, for upstreams that say how large it is (llama.cpp's
`/props` n_ctx, in `Capabilities.context`): a prompt that cannot fit is answered with `ContextTooLong`, naming
both sizes, instead of the upstream's own 400.

The cheap estimate (upstreams/tokens.estimate, which overcounts) lets most requests through untouched; only one
over the context is counted by the upstream (llama.cpp's /apply-template and /tokenize) before it is turned away,
so a prompt that fits is never refused on a guess. The upstream's own context refusal of the first round becomes
the same error. Later rounds are left to the round loop (a correction that does not fit surrenders).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ContextTooLong, UpstreamError
from sanctum_proxy.repair.events import Sender
from sanctum_proxy.repair.upstream_errors import context_exceeded
from sanctum_proxy.upstreams import tokens


def from_refusal(error: UpstreamError, context: int | None, sent: JSONObject) -> ContextTooLong | None:
    """The upstream's "exceeds the context" answer as ContextTooLong: its own sizes (llama.cpp's
    `n_prompt_tokens`, `n_ctx`) where it gives them, else the estimate and the probed context."""
    if not context_exceeded(error, sent):
        return None
    fields = error.extra()
    prompt, size = _count(fields.get("n_prompt_tokens")), _count(fields.get("n_ctx")) or context
    if size is None:
        return None
    return ContextTooLong(prompt or tokens.estimate(sent), size, prompt is not None)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def fitted(send: Sender, upstream: tokens.JsonProber, root_url: str, context: int | None,
           timeout: float) -> Sender:
    """`send` whose first round is checked against `context` (None: only the upstream's refusal is read)."""
    first = True

    async def send_fitted(body: JSONObject, live: bool) -> AsyncIterator[Any]:
        nonlocal first
        checking, first = first, False
        if checking and context is not None and tokens.estimate(body) > context:
            counted, exact = await tokens.count(upstream, root_url, body, timeout)
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

    return send_fitted
