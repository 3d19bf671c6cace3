"""POST /v1/chat/completions: read and check the request, settle the mode, run the round loop, answer
as a chat.completion or as an SSE stream of chunks."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from fastapi import Request
from fastapi.responses import Response

from sanctum_proxy.config import Settings
from sanctum_proxy.core import legacy, reasoning
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core.offload import off_loop_if, offloaded
from sanctum_proxy.core.shapes import META, ClientMessage, JSONObject, Usage, answer_meta
from sanctum_proxy.errors import BodyTooLarge
from sanctum_proxy.protocols.chat_events import chat_meta
from sanctum_proxy.protocols.chat_request import ChatRequest, chat_request, json_object
from sanctum_proxy.repair.events import Answer, ContentDelta, Final, Sender
from sanctum_proxy.repair.offloading import heavy_body, new_tools, read_tools
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.routes import choices
from sanctum_proxy.routes.disconnect import ClientGone, gone_response, unless_disconnected
from sanctum_proxy.routes.rounds import Shown, kept_run, recorder_of, run_traced
from sanctum_proxy.routes.sse import stream_answer
from sanctum_proxy.services import destination, services
from sanctum_proxy.state import trace_store
from sanctum_proxy.upstreams import capabilities
from sanctum_proxy.web.auth import check_client_key, forwarded_key
from sanctum_proxy.web.client_protocols import ClientProtocol
from sanctum_proxy.web.json_response import JsonResponse
from sanctum_proxy.web.limits import BODY

E = TypeVar("E")
T = TypeVar("T")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` (never buffered whole first). One the
    concurrency limit read whole already (under the same limit) is taken as it is."""
    read = request.scope.get(BODY)
    if isinstance(read, bytes) and len(read) <= limit:
        request.state.body_bytes = len(read)  # the trace queue's budget counts it (state/recorder.py)
        return read
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
    request.state.body_bytes = len(body)  # the trace queue's budget counts it (state/recorder.py)
    return bytes(body)


async def off_loop_if_heavy(raw: bytes, parse: Callable[[JSONObject], T]) -> T:
    """`parse` of the decoded body: inline when decoding and its checks are quick (a known tool list), else
    on the CPU pool."""
    if heavy_body(raw):
        return await offloaded(lambda: parse(json_object(raw)))
    body = json_object(raw)
    key = new_tools(raw, body)
    parsed = await off_loop_if(key is not None, parse, body)
    read_tools(key)
    return parsed


async def chat_completions(request: Request) -> Response:
    settings = services(request).settings
    check_client_key(request)
    raw = await read_body(request, settings.max_body_bytes)
    chat = await off_loop_if_heavy(raw, lambda body: chat_request(body, request.headers, settings))
    is_legacy = legacy.uses_functions(chat.body)
    if is_legacy:
        chat = chat.with_body(legacy.to_tools(chat.body))
    rounds = await start_rounds(request, chat, settings)
    if chat.stream:
        return await stream_answer(request, rounds.chat, rounds.plan, rounds.trace_id, rounds.auth,
                                   is_legacy=is_legacy)
    try:
        final = await final_answer(request, rounds)
    except ClientGone:
        return gone_response()
    body = completion(final, rounds.chat, rounds.trace_id, is_legacy, split_reasoning=rounds.split_reasoning)
    return JsonResponse(body, headers=answer_headers(final, rounds.trace_id))


PROTOCOL = ClientProtocol("chat", ("/v1/chat/completions",), chat_completions, areas=("/v1/",))


@dataclass(frozen=True)
class Rounds:
    """A request ready for the round loop: routed, planned and traced (the chat endpoint and the
    endpoints translated to chat share it)."""

    chat: ChatRequest
    plan: Plan
    trace_id: str
    auth: str | None
    split_reasoning: bool = False  # the setting reasoning_format = "split"
    started_ns: int = dataclasses.field(default_factory=time.perf_counter_ns)


async def start_rounds(request: Request, chat: ChatRequest, settings: Settings) -> Rounds:
    parts = services(request)
    dest = request.state.destination = parts.pools.destination(chat.model)  # the upstream pool for this model
    chat = chat.with_body(dest.rewrite(chat.body))  # an alias becomes the upstream's name
    plan = await make_plan(request, chat, settings)
    trace_id = trace_store.new_id()
    parts.recorder.begin(request, trace_id, chat, plan)
    auth = forwarded_key(request) if settings.forward_client_key else None
    return Rounds(chat, plan, trace_id, auth, settings.reasoning_format == "split")


async def final_answer(request: Request, rounds: Rounds) -> Final:
    """The round loop's Final, non-streaming; ClientGone if the client leaves first. For n > 1 choices a
    Finals (routes/choices.py)."""
    later = plain_sender(request, rounds.auth)
    events: AsyncIterator[Shown | tuple[int, Shown]]
    if choices.count(rounds.chat.body) > 1:  # every choice's events (the recorder keeps their omens), Finals last
        many = choices.Choices(rounds.plan, later, kept_run(request), recorder_of(request))
        events = services(request).recorder.watch(
            request, many.events(many.lead_sender(plain_first_of_several(request, rounds.auth, many))))
    else:
        events = run_traced(request, rounds.plan, later)
    final = await unless_disconnected(request, last_event(events))
    assert isinstance(final, Final)
    return final


def plain_first_of_several(request: Request, auth: str | None, many: choices.Choices) -> Sender:
    """The first round of n > 1 choices: sent once with `n`; choice 0's Answer for its own loop, a loop
    started for each other choice."""
    upstream = destination(request).upstream

    async def first(body: JSONObject, live: bool) -> AsyncIterator[Answer]:
        reply = await upstream.chat({**body, "stream": False}, auth)
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


async def make_plan(request: Request, chat: ChatRequest, settings: Settings) -> Plan:
    book = Toolbox.of(chat.tools) if chat.tools else None
    if book is not None and chat.body.get("tool_choice") == "none":
        book = None
    choice = chat.controls.spell_calling
    mode = "prompted" if choice == "prompted" else "native"
    opening: list[om.Omen] = []
    parts, key = services(request), destination(request).key  # decisions are per (upstream, model)
    if choice == "auto":
        decision = parts.modes.get(key, chat.model)
        if decision is None and book is not None and settings.probe_capabilities:
            opening = await settle_by_probe(request, settings, chat.model)
            decision = parts.modes.get(key, chat.model)
        if decision is not None:
            mode = decision.mode
    prompt_format = await pick_format(request, settings, chat.model, mode, book)  # may probe: caps after it
    caps = parts.capabilities.cached(key, chat.model)
    constrain = chat.controls.constrain or settings.constrain
    if caps is None and mode == "native" and book is not None and constrain != "off" and settings.probe_capabilities:
        caps = await probed(request, settings, chat.model)  # whether tool_choice can hold a correction round
    if caps is not None and caps.json_schema is False:
        constrain = "off"
    return Plan(body=chat.body, book=book, mode=mode, auto=choice == "auto",  # type: ignore[arg-type]
                max_rounds=chat.controls.max_repair_rounds, on_surrender=chat.controls.on_surrender,
                prompt_format=prompt_format, upstream=key,
                opening_omens=tuple(opening), constrain=constrain,  # type: ignore[arg-type]
                correction_context=settings.correction_context,
                grammar=caps is not None and caps.server == "llama.cpp",
                tool_choice=caps is None or caps.tool_choice is not False,
                native_calls=caps.tools if caps is not None else None,
                max_repair_bytes=settings.max_repair_bytes, follow_up_calls=settings.follow_up_calls,
                max_grammar_bytes=settings.max_grammar_bytes)


async def pick_format(request: Request, settings: Settings, model: str, mode: str, book: Toolbox | None) -> str:
    """The configured call format, or for "auto" the family the model's chat template shows (asked of the
    upstream once per model, before a prompted round needs it), else Hermes."""
    fmt = settings.prompt_format_for(model)
    if fmt != "auto":
        return fmt
    caps = services(request).capabilities.cached(destination(request).key, model)
    if caps is None and mode == "prompted" and book is not None and settings.probe_capabilities:
        caps = await probed(request, settings, model)
    return (caps.family if caps is not None else None) or "hermes"


async def probed(request: Request, settings: Settings, model: str) -> capabilities.Capabilities:
    """What the upstream says of this model (asked once per model: capabilities.CapabilityBook)."""
    state, dest = services(request), destination(request)
    return await state.capabilities.get(dest.key, model, lambda: capabilities.probe(
        dest.upstream, dest.upstream.root_url, model, settings.probe_timeout))


async def settle_by_probe(request: Request, settings: Settings, model: str) -> list[om.Omen]:
    """Ask the upstream what it can do (once per model); a model without tool support goes prompted
    before it ever sees `tools`, with a SpellCallingFallback omen on the request that found out."""
    state, dest = services(request), destination(request)
    caps = await state.capabilities.get(dest.key, model, lambda: capabilities.probe(
        dest.upstream, dest.upstream.root_url, model, settings.probe_timeout))
    if caps.tools is not False or state.modes.get(dest.key, model) is not None:
        return []
    state.modes.settle(dest.key, model, "prompted", "capability_probe")
    return [om.fallback(0, "capability_probe", None, caps.source)]


def plain_sender(request: Request, auth: str | None) -> Sender:
    upstream = destination(request).upstream

    async def send_plain(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | Answer]:
        reply = await upstream.chat({**body, "stream": False}, auth)
        yield answers_of(reply.body)[0]

    return send_plain


_BUILT = frozenset({"object", "choices", "usage", "sanctum"})  # written by `completion` itself


def answers_of(body: JSONObject) -> list[Answer]:
    """A chat.completion's choices as Answers, in index order (at least one: an empty answer where none is a
    message); the usage goes with the first only, the response's own fields with every one."""
    meta = answer_meta(body)
    extra = {k: v for k, v in body.items() if k not in META and k not in _BUILT}
    listed = body.get("choices")
    choices = sorted((c for c in listed if isinstance(c, dict)) if isinstance(listed, list) else (), key=_index)
    usage = cast("Usage | None", body.get("usage"))  # as the upstream sent it: its readers check (repair/usage.py)
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
    """The chat.completion: the answering round's own fields (logprobs, service_tier, llama.cpp's timings,
    vendor fields) as the upstream sent them, with the message and finish_reason the loop settled (with
    `split_reasoning`, reasoning markup in content moved into reasoning_content)."""
    if split_reasoning:
        final = dataclasses.replace(final, message=split_message(final.message))
        if isinstance(final, choices.Finals):
            final.each = [dataclasses.replace(f, message=split_message(f.message)) for f in final.each]
    message, finish = oc.message(final.message), final.finish_reason
    if is_legacy:
        message, finish = legacy.to_function_call(message, finish)
    each = [oc.choice(0, message, finish, final.choice_extra)]
    if isinstance(final, choices.Finals):  # n > 1: each choice in its place, as its own loop settled it
        settled = [(oc.message(f.message), f.finish_reason) for f in final.each]
        if is_legacy:
            settled = [legacy.to_function_call(m, r) for m, r in settled]
        each = [oc.choice(i, m, r, f.choice_extra)
                for i, ((m, r), f) in enumerate(zip(settled, final.each, strict=True))]
    meta = chat_meta(trace_id, chat.model, int(time.time()), final.meta)
    sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, trace_id)
    return oc.completion(meta, each, final.usage, final.extra, sanctum)


def split_message(message: ClientMessage) -> ClientMessage:
    """The setting reasoning_format = "split": reasoning markup in content moved into reasoning_content."""
    content = message.get("content")
    if not isinstance(content, str):
        return message
    text, thought = reasoning.split(content)
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
