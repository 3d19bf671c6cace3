"""Every error the proxy answers with, and the one place that turns them into OpenAI error bodies.

    ProxyError                      status, type, code, param, message
     ├── InvalidRequest             400 invalid_request_error (bad JSON, messages, tools, controls)
     │    ├── BodyTooLarge          413 invalid_request_error
     │    ├── BodyTimeout           408 invalid_request_error, code request_timeout (body_read_timeout)
     │    ├── ArrayTooLong          400 invalid_request_error, code array_above_max_length (messages, tools)
     │    ├── ModelNotFound         404 invalid_request_error, code model_not_found (no upstream serves it)
     │    ├── ContextTooLong        400 invalid_request_error, code context_length_exceeded (prompt > n_ctx)
     │    └── NotFound              404 invalid_request_error, code not_found (e.g. an unknown trace id)
     ├── Unauthorized               401 invalid_api_key
     ├── TooManyRequests            429 rate_limit_exceeded
     ├── Overloaded                 503 server_error, code server_overloaded (max_connections in flight)
     ├── UpstreamUnreachable        502 upstream_unreachable (refused, reset before an answer)
     ├── UpstreamTimeout            504 upstream_timeout
     ├── UpstreamError              the upstream's status, upstream_error, the upstream's message kept
     └── SpellCallParseError        422 spell_call_parse_error, with rounds and every rejected raw answer

`retry_headers` says whether a client should retry (`x-should-retry`, read by the OpenAI SDKs); `internal`
turns an exception that is a bug into the 500 it answers with; `CLIENT_GONE` is the status a request gets
when its client left. `responses.error_response` is the one place an error becomes an HTTP response.
"""

from __future__ import annotations

from typing import Any

from sanctum_proxy.core import openai_chat
from sanctum_proxy.core.openai_chat import ErrorBody
from sanctum_proxy.core.shapes import JSONObject

CLIENT_GONE = 499  # nginx's "client closed request": nobody reads it, the access log and traces do
_NO_RETRY = frozenset({400, 401, 413, 422})  # the same request would fail the same way


class ProxyError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def body(self) -> ErrorBody:
        """The OpenAI-shaped error body: {"error": {message, type, param, code}}, then the error's own fields."""
        return openai_chat.error_body(self.message, self.type, self.param, self.code, self.extra())

    def extra(self) -> JSONObject:
        return {}


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class BodyTimeout(InvalidRequest):
    status = 408
    code = "request_timeout"


class ArrayTooLong(InvalidRequest):
    code = "array_above_max_length"


class ModelNotFound(InvalidRequest):
    status = 404
    code = "model_not_found"


class ContextTooLong(InvalidRequest):
    """The first round's prompt is longer than the model's context: both sizes named, in the message and as
    `prompt_tokens` and `context` (`counted`: the upstream's count, else an estimate)."""

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, context: int, counted: bool) -> None:
        how = "as the upstream counts them" if counted else "estimated"
        super().__init__(f"the prompt is {prompt_tokens} tokens ({how}), more than the model's context of "
                         f"{context} tokens (the upstream's n_ctx); tools offered in prompted mode count too: "
                         "shorten the conversation or the tool list, or give the server a larger context",
                         param="messages")
        self.prompt_tokens, self.context, self.counted = prompt_tokens, context, counted

    def extra(self) -> JSONObject:
        return {"prompt_tokens": self.prompt_tokens, "context": self.context, "counted": self.counted}


class NotFound(InvalidRequest):
    status = 404
    code = "not_found"


class Unauthorized(ProxyError):
    status = 401
    type = "invalid_api_key"
    code = "invalid_api_key"


class TooManyRequests(ProxyError):
    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"


class Overloaded(ProxyError):
    """More requests in flight than `max_connections` (web/connection_limit.py); OpenAI's own 503 says
    `server_error` too."""

    status = 503
    code = "server_overloaded"


class UpstreamUnreachable(ProxyError):
    status = 502
    type = "upstream_unreachable"
    code = "upstream_unreachable"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_timeout"
    code = "upstream_timeout"


class UpstreamError(ProxyError):
    """The upstream answered with an error; its status, message, code and param are kept. `type` stays the
    contract's `upstream_error`; the upstream's own type goes in `upstream_type`, and its other fields
    (llama.cpp's `n_prompt_tokens`, `n_ctx`) come along."""

    type = "upstream_error"
    code = "upstream_error"

    def __init__(self, status: int, message: str, raw: Any = None) -> None:
        super().__init__(message)
        self.status = status if 400 <= status <= 599 else 502
        self.upstream_status = status
        self.raw = raw
        fields = upstream_fields(raw)
        code, param = fields.get("code"), fields.get("param")
        if isinstance(code, str) and code:
            self.code = code
        if isinstance(param, str):
            self.param = param
        self._kept = {k: v for k, v in fields.items() if k not in _OWN}
        if isinstance(fields.get("type"), str):
            self._kept["upstream_type"] = fields["type"]

    def extra(self) -> JSONObject:
        return {**self._kept, "upstream_status": self.upstream_status}


_OWN = frozenset({"message", "type", "param", "code", "upstream_status", "upstream_type", "rounds", "rejected"})


def upstream_fields(raw: Any) -> JSONObject:
    """The upstream's error object (`{"error": {...}}` of OpenAI, llama.cpp and vLLM), or {}."""
    error = raw.get("error") if isinstance(raw, dict) else None
    return error if isinstance(error, dict) else {}


def inband_status(raw: Any) -> int:
    """The real status of an error sent inside a stream: llama.cpp and vLLM put it in the error's `code`
    (500 when it says none)."""
    code = upstream_fields(raw).get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599 else 500


class ToolCallParseError(ProxyError):
    """Surrender: the model gave no valid answer within max_repair_rounds extra rounds."""

    status = 422
    type = "spell_call_parse_error"
    code = "spell_call_parse_error"

    def __init__(self, message: str, *, rounds: int, rejected: list[str]) -> None:
        super().__init__(message)
        self.rounds = rounds
        self.rejected = rejected

    def extra(self) -> JSONObject:
        return {"rounds": self.rounds, "rejected": self.rejected}


def retry_headers(error: ProxyError) -> dict[str, str]:
    """`x-should-retry: false` where retrying the same request cannot help (the SDKs retry some of these)."""
    return {"x-should-retry": "false"} if error.status in _NO_RETRY else {}


MAX_INTERNAL_MESSAGE = 300
MAX_SHOWN = 120


def shown(value: Any) -> str:
    """A client's value quoted in an error message: its repr, clipped (it may be megabytes, or deep)."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def internal(exc: BaseException) -> ProxyError:
    """A bug, as the 500 error the client gets (a stream ends with it, never a silent cut); the exception's text
    clipped (it may quote a value of the request)."""
    text = str(exc)
    if len(text) > MAX_INTERNAL_MESSAGE:
        text = text[:MAX_INTERNAL_MESSAGE] + "..."
    return ProxyError(f"internal error: {type(exc).__name__}: {text}")


def no_answer() -> ProxyError:
    """The round loop ended without an answer (a bug: it always ends in one or an error)."""
    return ProxyError("internal error: the round loop ended without an answer")
