"""The one place an error becomes an HTTP response (responses.error_response), for every route and dialect."""

from __future__ import annotations

import orjson

from sanctum_proxy.errors import (
    CLIENT_GONE,
    InvalidRequest,
    ToolCallParseError,
    UpstreamError,
    UpstreamTimeout,
    internal,
    no_answer,
)
from sanctum_proxy.web.json_response import error_response


def test_an_error_the_same_request_would_repeat_says_do_not_retry() -> None:
    for error in (InvalidRequest("bad"), ToolCallParseError("gave up", rounds=3, rejected=["a", "b", "c"]),
                  UpstreamError(400, "too long")):
        r = error_response(error)
        assert r.status_code == error.status and r.headers["x-should-retry"] == "false"
        assert orjson.loads(r.body) == error.body()
    for error in (UpstreamTimeout("slow"), UpstreamError(503, "loading"), internal(RuntimeError("x"))):
        assert "x-should-retry" not in error_response(error).headers  # the SDK's own rule decides


def test_a_dialect_keeps_its_body_and_the_same_headers() -> None:
    error = InvalidRequest("bad")
    own = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    r = error_response(error, own)
    assert orjson.loads(r.body) == own and r.headers["x-should-retry"] == "false" and r.status_code == 400


def test_a_bug_is_a_500_that_names_the_exception() -> None:
    error = internal(KeyError("k"))
    assert error.status == 500 and error.body()["error"]["message"] == "internal error: KeyError: 'k'"
    assert no_answer().status == 500 and CLIENT_GONE == 499
