"""The proxy's errors and their OpenAI error bodies (hierarchy: docs/decisions.md)."""

from __future__ import annotations

from typing import Any

from sanctum_proxy.core import openai_chat
from sanctum_proxy.core.openai_chat import ErrorBody
from sanctum_proxy.core.shapes import JSONObject

CLIENT_GONE = 499  # nginx's "client closed request"
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
        """{"error": {message, type, param, code}}, then the error's own fields."""
        return openai_chat.error_body(self.message, self.type, self.param, self.code, self.extra())

    def extra(self) -> JSONObject:
        return {}


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class MethodNotAllowed(InvalidRequest):
    status = 405


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
    """The prompt exceeds the model's context; both sizes are named."""

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, context: int, counted: bool, message: str | None = None) -> None:
        how = "as the upstream counts them" if counted else "estimated"
        super().__init__(message or f"the prompt is {prompt_tokens} tokens ({how}), more than the model's context "
                         f"of {context} tokens (the upstream's n_ctx); tools offered in prompted mode count too: "
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
    """More requests in flight than `max_connections`."""

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
    """The upstream's error with its fields kept; its own type goes in `upstream_type`."""

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
    """The upstream's `{"error": {...}}` object, or {}."""
    error = raw.get("error") if isinstance(raw, dict) else None
    return error if isinstance(error, dict) else {}


def inband_status(raw: Any) -> int:
    """An in-stream error's status, from its `code` (500 when none)."""
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
    """`x-should-retry: false` where retrying the same request cannot help."""
    return {"x-should-retry": "false"} if error.status in _NO_RETRY else {}


MAX_INTERNAL_MESSAGE = 300
MAX_SHOWN = 120


def shown(value: Any) -> str:
    """A client's value quoted in an error message: its repr, clipped."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def internal(exc: BaseException) -> ProxyError:
    """A bug as the 500 the client gets, its text clipped since it may quote the request."""
    text = str(exc)
    if len(text) > MAX_INTERNAL_MESSAGE:
        text = text[:MAX_INTERNAL_MESSAGE] + "..."
    return ProxyError(f"internal error: {type(exc).__name__}: {text}")


def no_answer() -> ProxyError:
    """The round loop ended without an answer, which is a bug."""
    return ProxyError("internal error: the round loop ended without an answer")
