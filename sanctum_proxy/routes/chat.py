"""POST /v1/chat/completions: read and check the request, settle the mode, run the round loop, answer
as a chat.completion or as an SSE stream of chunks."""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..responses import JsonResponse as ORJSONResponse

from .. import legacy
from .. import omens as om
from ..config import Settings
from ..errors import BodyTooLarge, ProxyError, Unauthorized
from ..protocol import ChatRequest, parse_chat_request
from ..repair.loop import Answer, ContentDelta, Final, Plan, run
from ..repair.spellbook import SpellBook
from ..streaming import Assembler, call_deltas, chunk

router = APIRouter()


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` (never buffered whole first)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
    return bytes(body)


def check_key(request: Request, settings: Settings) -> None:
    if not settings.api_keys:
        return
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not any(hmac.compare_digest(given.encode(), key.encode()) for key in settings.api_keys):
        raise Unauthorized("missing or wrong API key")


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    check_key(request, settings)
    chat = parse_chat_request(await read_body(request, settings.max_body_bytes), request.headers, settings)
    is_legacy = legacy.uses_functions(chat.body)
    if is_legacy:
        chat = chat.with_body(legacy.to_tools(chat.body))
    plan = await make_plan(request, chat, settings)
    trace_id = uuid.uuid4().hex
    auth = request.headers.get("authorization") if settings.forward_client_key else None
    if chat.stream:
        return await stream_answer(request, chat, plan, trace_id, auth)
    final = None
    async for event in run(plan, sender(request, auth, streaming=False)):
        if isinstance(event, Final):
            final = event
    assert final is not None
    body = completion(final, chat, trace_id, is_legacy)
    return ORJSONResponse(body, headers=answer_headers(final, trace_id))


async def make_plan(request: Request, chat: ChatRequest, settings: Settings) -> Plan:
    book = SpellBook.from_tools(chat.tools) if chat.tools else None
    if book is not None and chat.body.get("tool_choice") == "none":
        book = None
    choice = chat.controls.spell_calling
    mode = "prompted" if choice == "prompted" else "native"
    if choice == "auto":
        decision = request.app.state.modes.get(settings.upstream, chat.model)
        if decision is not None:
            mode = decision.mode
    return Plan(body=chat.body, book=book, mode=mode, auto=choice == "auto",  # type: ignore[arg-type]
                max_rounds=chat.controls.max_repair_rounds, on_surrender=settings.on_surrender,
                prompt_format=settings.prompt_format, upstream=settings.upstream, modes=request.app.state.modes)


def sender(request: Request, auth: str | None, *, streaming: bool) -> Any:
    upstream = request.app.state.upstream

    async def send_plain(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | Answer]:
        reply = await upstream.chat({**body, "stream": False}, auth)
        choice = reply.body["choices"][0]
        meta = {k: reply.body[k] for k in ("id", "model", "created", "system_fingerprint") if k in reply.body}
        yield Answer(choice.get("message") or {}, choice.get("finish_reason"), reply.body.get("usage"), meta)

    async def send_stream(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | Answer]:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        assembler = Assembler()
        async with upstream.chat_stream(body, auth) as chunks:
            async for piece in chunks:
                text = assembler.feed(piece)
                if text and live:
                    yield ContentDelta(text)
        answer = Answer(assembler.message(), assembler.finish_reason, assembler.usage, assembler.meta)
        yield answer
        if live:
            yield _Released(assembler)

    return send_stream if streaming else send_plain


class _Released(ContentDelta):
    """Marks how much content a live round already showed (the stream subtracts it from the final)."""

    def __init__(self, assembler: Assembler) -> None:
        super().__init__("")
        object.__setattr__(self, "assembler", assembler)


def completion(final: Final, chat: ChatRequest, trace_id: str, is_legacy: bool) -> dict[str, Any]:
    message, finish = final.message, final.finish_reason
    if is_legacy:
        message, finish = legacy.to_function_call(message, finish)
    meta = final.meta
    body: dict[str, Any] = {
        "id": meta.get("id") or f"chatcmpl-{trace_id}", "object": "chat.completion",
        "created": meta.get("created") or int(time.time()), "model": meta.get("model") or chat.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
    }
    if final.usage is not None:
        body["usage"] = final.usage
    if meta.get("system_fingerprint"):
        body["system_fingerprint"] = meta["system_fingerprint"]
    body["sanctum"] = om.sanctum_object(final.mode, final.rounds, final.omens, trace_id)
    return body


def answer_headers(final: Final, trace_id: str) -> dict[str, str]:
    return {"x-sanctum-spell-calling": final.mode, "x-sanctum-trace-id": trace_id,
            "x-sanctum-rounds": str(final.rounds), "x-sanctum-omens": om.header_summary(final.omens)}


async def stream_answer(request: Request, chat: ChatRequest, plan: Plan, trace_id: str,
                        auth: str | None) -> Response:
    """Headers wait for the first upstream event, so an error before it is a plain HTTP error."""
    settings: Settings = request.app.state.settings
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def produce() -> None:
        try:
            async for event in run(plan, sender(request, auth, streaming=True)):
                await queue.put(event)
        except ProxyError as exc:
            await queue.put(exc)
        except Exception as exc:  # a bug must end the stream with an error, never a silent cut
            await queue.put(ProxyError(f"internal error: {type(exc).__name__}: {exc}"))
        await queue.put(None)

    task = asyncio.create_task(produce())
    first = await queue.get()
    if isinstance(first, ProxyError):
        task.cancel()
        return ORJSONResponse(first.body(), status_code=first.status)
    meta = {"id": f"chatcmpl-{trace_id}", "created": int(time.time()), "model": chat.model}
    events = _SseWriter(meta, chat, plan, trace_id, settings.keepalive_seconds)
    headers = {"x-sanctum-spell-calling": plan.mode, "x-sanctum-trace-id": trace_id, "cache-control": "no-cache"}
    return StreamingResponse(events.write(first, queue, task), media_type="text/event-stream", headers=headers)


class _SseWriter:
    def __init__(self, meta: dict[str, Any], chat: ChatRequest, plan: Plan, trace_id: str,
                 keepalive: float) -> None:
        self.meta, self.chat, self.plan, self.trace_id, self.keepalive = meta, chat, plan, trace_id, keepalive
        self.omen_style = chat.controls.omens
        self.sent_omens = 0
        self.assembler: Assembler | None = None

    def data(self, payload: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    async def write(self, first: Any, queue: asyncio.Queue[Any], task: asyncio.Task[None]) -> AsyncIterator[bytes]:
        try:
            yield self.data(chunk(self.meta, {"role": "assistant", "content": ""}))
            event = first
            while event is not None:
                for out in self.render(event):
                    yield out
                if isinstance(event, (ProxyError, Final)):
                    return
                try:
                    event = await asyncio.wait_for(queue.get(), self.keepalive)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    event = ...
        finally:
            task.cancel()

    def render(self, event: Any) -> list[bytes]:
        if event is ...:
            return []
        if isinstance(event, _Released):
            self.assembler = event.assembler  # type: ignore[attr-defined]
            return []
        if isinstance(event, ContentDelta):
            return [self.data(chunk(self.meta, {"content": event.text}))] if event.text else []
        if isinstance(event, ProxyError):
            return [self.data(event.body())]
        if isinstance(event, Final):
            return self.finish(event)
        return []

    def omen_lines(self, omens: list[om.Omen]) -> list[bytes]:
        render = om.sse_event if self.omen_style == "events" else om.sse_comment
        return [render(o) for o in omens]

    def finish(self, final: Final) -> list[bytes]:
        out = self.omen_lines(final.omens)
        rest = self.assembler.unreleased(final.message.get("content")) if self.assembler else (
            final.message.get("content") or "")
        if rest:
            out.append(self.data(chunk(self.meta, {"content": rest})))
        for index, call in enumerate(final.message.get("tool_calls") or []):
            out += [self.data(chunk(self.meta, delta)) for delta in call_deltas(index, call)]
        sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        include_usage = (self.chat.body.get("stream_options") or {}).get("include_usage") is True
        if include_usage:
            out.append(self.data(chunk(self.meta, {}, final.finish_reason)))
            usage_chunk = {**chunk(self.meta, {}), "choices": [], "usage": final.usage, "sanctum": sanctum}
            out.append(self.data(usage_chunk))
        else:
            out.append(self.data(chunk(self.meta, {}, final.finish_reason, sanctum=sanctum)))
        out.append(b"data: [DONE]\n\n")
        return out
