"""POST /v1/responses and POST /v1/messages, translated to chat and served by the chat round loop.

With `responses_api` / `messages_api` = "pass" the endpoint is passed through untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sanctum_proxy.config import Settings
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.shapes import OLLAMA_FIELDS, JSONObject
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.protocols import messages_api, responses_output, responses_request
from sanctum_proxy.protocols.chat_request import ChatRequest, chat_request, check_depth
from sanctum_proxy.protocols.messages_events import MessagesWriter
from sanctum_proxy.protocols.reply import Reply
from sanctum_proxy.protocols.responses_events import ResponsesWriter
from sanctum_proxy.repair.loop_data import Final
from sanctum_proxy.routes.chat import answer_headers, final_answer, off_loop_if_heavy, split_message, start_rounds
from sanctum_proxy.routes.disconnect import ClientGone, gone_response
from sanctum_proxy.routes.passthrough import passthrough
from sanctum_proxy.routes.rounds import Rounds
from sanctum_proxy.routes.sse import stream_answer
from sanctum_proxy.services import services
from sanctum_proxy.state.recorder import trace_id
from sanctum_proxy.upstreams import tokens
from sanctum_proxy.web.auth import check_client_key
from sanctum_proxy.web.client_protocols import ClientProtocol
from sanctum_proxy.web.json_response import JsonResponse, error_response, unexpected
from sanctum_proxy.web.limits import request_body

router = APIRouter()


@dataclass(frozen=True)
class Dialect:
    """What differs between the endpoints translated to chat."""

    name: str  # the trace's protocol
    to_chat: Callable[[JSONObject], JSONObject]
    answer: Callable[[JSONObject, Rounds, Final, Reply], JSONObject]
    writer: Callable[[JSONObject, Rounds], Any]
    error_body: Callable[[ProxyError], Mapping[str, object]]
    on_surrender: Callable[[Settings], str]
    passed: Callable[[Settings], str | None] = lambda settings: None  # the path when passed through
    opening: Callable[[JSONObject], list[om.Omen]] = lambda body: []
    native_fields: bool = False  # its chat body may carry OLLAMA_FIELDS (the Ollama door's own)


async def responses(request: Request) -> Response:
    return await serve(request, RESPONSES)


async def messages(request: Request) -> Response:
    return await serve(request, MESSAGES)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """Anthropic's `{"input_tokens": N}`: exact from llama.cpp, else estimated (`x-sanctum-token-count`)."""
    settings = services(request).settings
    if settings.messages_api == "pass":
        return await passthrough("messages/count_tokens", request)
    try:
        key = check_client_key(request)
        chat = await off_loop_if_heavy(request_body(request),
                                       lambda body, known: _counted(body, request.headers, settings, known),
                                       "count_tokens")
        destination = services(request).pools.destination(chat.model)
        upstream = destination.upstream
        counted, exact = await tokens.count(upstream, upstream.root_url, destination.rewrite(chat.body),
                                            settings.probe_timeout, key.upstream)
    except ProxyError as exc:
        return refusal(MESSAGES, exc)
    except Exception as exc:  # a bug: still Anthropic's error shape
        return refusal(MESSAGES, unexpected(exc))
    return JsonResponse({"input_tokens": counted},
                        headers={"x-sanctum-token-count": "exact" if exact else "estimate"})


def _counted(body: JSONObject, headers: Mapping[str, str], settings: Settings, known: bool) -> ChatRequest:
    check_depth(body)
    return chat_request(messages_api.chat_messages(body), headers, settings, tools_checked=known)


async def serve(request: Request, dialect: Dialect) -> Response:
    settings = services(request).settings
    passed = dialect.passed(settings)
    if passed is not None:
        return await passthrough(passed, request)
    request.state.protocol = dialect.name
    try:
        key = check_client_key(request)
        body, chat = await off_loop_if_heavy(
            request_body(request), lambda body, known: _read(dialect, body, request.headers, settings, known),
            dialect.name)
        rounds = await start_rounds(request, chat, settings, key)
        opening = (*dialect.opening(body), *rounds.plan.opening_omens)
        rounds = replace(rounds, plan=replace(rounds.plan, opening_omens=opening))
        if chat.stream:
            return await stream_answer(request, rounds, writer=dialect.writer(body, rounds),
                                       refuse=lambda e: refusal(dialect, e, rounds.trace_id))
        final = await final_answer(request, rounds)
        answer = dialect.answer(body, rounds, final, reply_of(rounds, final))
        answer["sanctum"] = om.sanctum_object(final.mode, final.rounds, final.omens, rounds.trace_id)
        return JsonResponse(answer, headers=answer_headers(final, rounds.trace_id))
    except ClientGone:
        return gone_response()
    except ProxyError as exc:
        services(request).recorder.refused(request, exc)
        return refusal(dialect, exc, trace_id(request))
    except Exception as exc:  # a bug: still this protocol's error shape
        return refusal(dialect, unexpected(exc), trace_id(request))


def _read(dialect: Dialect, body: JSONObject, headers: Mapping[str, str], settings: Settings,
          known: bool) -> tuple[JSONObject, ChatRequest]:
    """`known`: this tool list was read before, its checks passed."""
    check_depth(body)  # before translating: answers echo fields
    chat = dialect.to_chat(body)
    if not dialect.native_fields:
        chat.pop(OLLAMA_FIELDS, None)  # a client of another door may not set Ollama's options this way
    return body, chat_request(chat, headers, settings, on_surrender=dialect.on_surrender(settings),
                              tools_checked=known)


def refusal(dialect: Dialect, error: ProxyError, trace_id: str | None = None) -> Response:
    return error_response(error, dialect.error_body(error), trace_id)


def reply_of(rounds: Rounds, final: Final) -> Reply:
    message = split_message(final.message, reasoning.MARKERS if rounds.split_reasoning else reasoning.UNRENDERED)
    return Reply.of(message, final.finish_reason, final.usage, final.accepted,
                    logprobs=final.choice_extra.get("logprobs"), model=final.meta.get("model"))


def _model(rounds: Rounds) -> str:
    return str(rounds.chat.body.get("model") or "")


# The Responses API.

def _response(body: JSONObject, rounds: Rounds, final: Final, reply: Reply) -> JSONObject:
    base = responses_output.skeleton(body, rounds.trace_id, int(time.time()), _model(rounds))
    return responses_output.finished(base, reply, responses_output.output_items(
        reply, rounds.trace_id, logprobs=responses_request.wants_logprobs(body),
        namespaced=responses_request.namespaced_names(body)))


def _responses_writer(body: JSONObject, rounds: Rounds) -> ResponsesWriter:
    base = responses_output.skeleton(body, rounds.trace_id, int(time.time()), _model(rounds))
    return ResponsesWriter(base, rounds.trace_id, rounds.trace_id,
                           lambda final: reply_of(rounds, final), logprobs=responses_request.wants_logprobs(body),
                           split_reasoning=rounds.split_reasoning,
                           namespaced=responses_request.namespaced_names(body))


RESPONSES = Dialect("responses", responses_request.to_chat, _response, _responses_writer, lambda e: e.body(),
                    lambda s: s.responses_on_surrender,
                    lambda s: "responses" if s.responses_api == "pass" else None, responses_request.withheld_omens)
RESPONSES_PROTOCOL = ClientProtocol("responses", ("/v1/responses",), responses, areas=("/v1/responses",))


# The Messages API.

def _message(body: JSONObject, rounds: Rounds, final: Final, reply: Reply) -> JSONObject:
    return messages_api.message(reply, rounds.trace_id, _asked_model(body))


def _asked_model(body: JSONObject) -> str:
    """The model the client asked for, as a stream names it before the upstream does."""
    return str(body.get("model") or "")


def _messages_writer(body: JSONObject, rounds: Rounds) -> MessagesWriter:
    start: JSONObject = {
        "id": f"msg_{rounds.trace_id}", "type": "message", "role": "assistant", "model": _asked_model(body),
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
    return MessagesWriter(start, rounds.trace_id, lambda final: reply_of(rounds, final),
                          split_reasoning=rounds.split_reasoning)


MESSAGES = Dialect("messages", messages_api.to_chat, _message, _messages_writer, messages_api.error_body,
                   lambda s: s.messages_on_surrender, lambda s: "messages" if s.messages_api == "pass" else None)
MESSAGES_PROTOCOL = ClientProtocol("messages", ("/v1/messages",), messages, messages_api.error_body,
                                   areas=("/v1/messages",), router=router)
