"""POST /v1/chat/completions: check the request, settle the mode, run the round loop, answer whole or as SSE."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar, cast

from fastapi import Request
from fastapi.responses import Response

from sanctum_proxy.config import Settings
from sanctum_proxy.core import legacy, reasoning
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core.offload import heavy_body, known_tools, off_loop_if, offloaded, read_tools, tools_key
from sanctum_proxy.core.shapes import META, OLLAMA_FIELDS, ClientMessage, JSONObject, Usage, answer_meta
from sanctum_proxy.protocols.chat_events import chat_meta
from sanctum_proxy.protocols.chat_request import ChatRequest, chat_request, json_object
from sanctum_proxy.repair.loop_data import Answer, ContentDelta, Final, Sender
from sanctum_proxy.routes import choices, context
from sanctum_proxy.routes.disconnect import ClientGone, gone_response, unless_disconnected
from sanctum_proxy.routes.planning import Planner
from sanctum_proxy.routes.rounds import Rounds, Shown, kept_run, recorder_of, run_traced
from sanctum_proxy.routes.sse import stream_answer
from sanctum_proxy.services import services
from sanctum_proxy.state import surrendered, trace_store
from sanctum_proxy.upstreams import affinity, chat_rounds
from sanctum_proxy.upstreams.upstream import Upstream
from sanctum_proxy.web.auth import ClientKey, check_client_key
from sanctum_proxy.web.client_protocols import ClientProtocol
from sanctum_proxy.web.json_response import JsonResponse
from sanctum_proxy.web.limits import request_body

E = TypeVar("E")
T = TypeVar("T")


async def off_loop_if_heavy(raw: bytes, parse: Callable[[JSONObject, bool], T], door: str = "chat") -> T:
    """`parse(body, tools_checked)`: inline when decoding and its checks are quick (a tool list this door
    checked before, whose checks are skipped), else on the CPU pool."""
    if heavy_body(raw):
        return await offloaded(lambda: parse(json_object(raw), False))
    body = json_object(raw)
    key = tools_key(raw, body, door)
    known = known_tools(key)
    parsed = await off_loop_if(key is not None and not known, parse, body, known)
    if not known:
        read_tools(key)
    return parsed


async def chat_completions(request: Request) -> Response:
    settings = services(request).settings
    key = check_client_key(request)
    raw = request_body(request)
    chat = await off_loop_if_heavy(raw, lambda body, known: chat_request(body, request.headers, settings,
                                                                         tools_checked=known))
    chat.body.pop(OLLAMA_FIELDS, None)  # only the Ollama door sets Ollama's own options
    is_legacy = legacy.uses_functions(chat.body)
    if is_legacy:
        chat = chat.with_body(legacy.to_tools(chat.body))
    rounds = await start_rounds(request, chat, settings, key)
    if chat.stream:
        return await stream_answer(request, rounds, is_legacy=is_legacy)
    try:
        final = await final_answer(request, rounds)
    except ClientGone:
        return gone_response()
    body = completion(final, rounds.chat, rounds.trace_id, is_legacy, split_reasoning=rounds.split_reasoning)
    return JsonResponse(body, headers=answer_headers(final, rounds.trace_id))


PROTOCOL = ClientProtocol("chat", ("/v1/chat/completions",), chat_completions, areas=("/v1/",))


async def start_rounds(request: Request, chat: ChatRequest, settings: Settings, key: ClientKey) -> Rounds:
    parts = services(request)
    dest = parts.pools.destination(chat.model)
    chat = chat.with_body(dest.rewrite(chat.body))  # an alias becomes the upstream's name
    auth = key.upstream
    chat, widened = await context.ollama_fitted(parts, dest, chat, auth)  # Ollama's num_ctx raised to hold it
    affinity.pin(dest.upstream.backends, request.headers, chat.body)  # one backend per conversation
    plan = await Planner(settings, parts, dest, auth).plan(chat)
    if parts.surrendered:  # nothing is hashed while no request surrendered recently
        plan = surrendered.again(plan, parts.surrendered, key.presented)
    if widened is not None:
        plan = dataclasses.replace(plan, opening_omens=(*plan.opening_omens, widened))
    trace_id = trace_store.new_id()
    parts.recorder.begin(request, trace_id, chat, plan)
    return Rounds(chat, plan, trace_id, dest, key, settings.reasoning_format == "split")


async def final_answer(request: Request, rounds: Rounds) -> Final:
    """The round loop's Final (Finals for n > 1); ClientGone if the client leaves first."""
    later = plain_sender(rounds.dest.upstream, rounds.auth)
    events: AsyncIterator[Shown | tuple[int, Shown]]
    if choices.count(rounds.chat.body) > 1:  # Finals last
        many = choices.Choices(rounds.plan, later, kept_run(request, rounds), recorder_of(request))
        events = services(request).recorder.watch(
            request, many.events(many.lead_sender(plain_first_of_several(rounds.dest.upstream, rounds.auth, many))))
    else:
        events = run_traced(request, rounds, later)
    final = await unless_disconnected(request, last_event(events))
    assert isinstance(final, Final)
    return final


def plain_first_of_several(upstream: Upstream, auth: str | None, many: choices.Choices) -> Sender:
    """The first round of n > 1 choices, sent once with `n`; the other choices get loops of their own."""

    async def first(body: JSONObject, live: bool) -> AsyncIterator[Answer]:
        reply = await chat_rounds.chat(upstream, {**body, "stream": False}, auth)
        answers = answers_of(reply.body)
        for index, answer in enumerate(answers[1:], 1):
            many.spawn(index, choices.one_answer(answer))
        yield answers[0]

    return first


async def last_event(events: AsyncIterator[E]) -> E | None:
    final = None
    async for event in events:
        final = event
    return final


def plain_sender(upstream: Upstream, auth: str | None) -> Sender:
    async def send_plain(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | Answer]:
        reply = await chat_rounds.chat(upstream, {**body, "stream": False}, auth)
        yield answers_of(reply.body)[0]

    return send_plain


_BUILT = frozenset({"object", "choices", "usage", "sanctum"})


def answers_of(body: JSONObject) -> list[Answer]:
    """A chat.completion's choices as Answers in order; usage goes with the first only."""
    meta = answer_meta(body)
    extra = {k: v for k, v in body.items() if k not in META and k not in _BUILT}
    listed = body.get("choices")
    choices = sorted((c for c in listed if isinstance(c, dict)) if isinstance(listed, list) else (), key=_index)
    usage = cast("Usage | None", body.get("usage"))  # as the upstream sent it
    out = []
    for i, choice in enumerate(choices):
        choice_extra = {k: v for k, v in choice.items() if k not in ("index", "message", "finish_reason")}
        out.append(Answer(choice.get("message") or {}, choice.get("finish_reason"),
                          usage if i == 0 else None, meta, extra, choice_extra))
    return out or [Answer({}, None, usage, meta, extra)]


def _index(choice: JSONObject) -> int:
    index = choice.get("index")
    return index if isinstance(index, int) else 0


def completion(final: Final, chat: ChatRequest, trace_id: str, is_legacy: bool, *,
               split_reasoning: bool = False) -> oc.Completion:
    """The chat.completion: the answering round's own fields, with the message and finish_reason the loop settled."""
    markers = reasoning.MARKERS if split_reasoning else reasoning.UNRENDERED
    final = dataclasses.replace(final, message=split_message(final.message, markers))
    if isinstance(final, choices.Finals):
        final.each = [dataclasses.replace(f, message=split_message(f.message, markers)) for f in final.each]
    message, finish = oc.message(final.message), final.finish_reason
    if is_legacy:
        message, finish = legacy.to_function_call(message, finish)
    each = [oc.choice(0, message, finish, final.choice_extra)]
    if isinstance(final, choices.Finals):  # each choice as its own loop settled it
        settled = [(oc.message(f.message), f.finish_reason) for f in final.each]
        if is_legacy:
            settled = [legacy.to_function_call(m, r) for m, r in settled]
        each = [oc.choice(i, m, r, f.choice_extra)
                for i, ((m, r), f) in enumerate(zip(settled, final.each, strict=True))]
    meta = chat_meta(trace_id, chat.model, int(time.time()), final.meta)
    sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, trace_id)
    return oc.completion(meta, each, final.usage, final.extra, sanctum)


def split_message(message: ClientMessage, markers: tuple[reasoning.Marker, ...] = reasoning.MARKERS) -> ClientMessage:
    content = message.get("content")
    if not isinstance(content, str):
        return message
    text, thought = reasoning.split(content, markers)
    if text == content and not thought:
        return message
    out: ClientMessage = {**message, "content": text or (None if message.get("tool_calls") else "")}
    if thought:
        before = message.get("reasoning_content")
        out["reasoning_content"] = f"{before}{thought}" if isinstance(before, str) else thought
    return out


def answer_headers(final: Final, trace_id: str) -> dict[str, str]:
    return {"x-sanctum-spell-calling": final.mode, "x-sanctum-trace-id": trace_id,
            "x-sanctum-rounds": str(final.rounds), "x-sanctum-omens": om.header_summary(final.omens)}
