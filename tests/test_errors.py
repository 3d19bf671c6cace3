"""errors.py: each error's OpenAI body; an upstream's error keeps its status, message, code, param and other
fields; an in-stream error's real status; a client's value shown clipped."""

from __future__ import annotations

from typing import Any

from sanctum_proxy.errors import (
    MAX_SHOWN,
    ModelNotFound,
    ToolCallParseError,
    UpstreamError,
    inband_status,
    shown,
    upstream_fields,
)


def test_an_error_body_is_openais_shape() -> None:
    error = ModelNotFound("no upstream serves 'x'", param="model")
    assert error.status == 404
    assert error.body() == {"error": {"message": "no upstream serves 'x'", "type": "invalid_request_error",
                                      "param": "model", "code": "model_not_found"}}


def test_an_upstream_error_keeps_its_fields() -> None:
    raw = {"error": {"code": 400, "message": "too long", "type": "exceed_context_size_error",
                     "n_prompt_tokens": 5000, "n_ctx": 4096}}
    error = UpstreamError(400, "too long", raw)
    body: dict[str, Any] = dict(error.body()["error"])
    assert (error.status, body["type"], body["code"]) == (400, "upstream_error", "upstream_error")
    assert body["upstream_type"] == "exceed_context_size_error"
    assert (body["n_prompt_tokens"], body["n_ctx"], body["upstream_status"]) == (5000, 4096, 400)
    named = UpstreamError(422, "bad", {"error": {"code": "context_length_exceeded", "param": "messages"}})
    assert (named.code, named.param) == ("context_length_exceeded", "messages")
    assert UpstreamError(302, "odd").status == 502


def test_a_surrender_lists_its_rounds_and_rejected_answers() -> None:
    body: dict[str, Any] = dict(ToolCallParseError("gave up", rounds=3, rejected=["a", "b"]).body()["error"])
    assert (body["code"], body["rounds"], body["rejected"]) == ("spell_call_parse_error", 3, ["a", "b"])


def test_in_stream_status_and_upstream_fields() -> None:
    assert inband_status({"error": {"code": 503, "message": "loading"}}) == 503
    assert inband_status({"error": {"code": True}}) == 500
    assert inband_status({"error": {"code": 200}}) == 500
    assert inband_status("oops") == 500
    assert upstream_fields({"error": "text"}) == {}


def test_a_clients_value_is_shown_clipped() -> None:
    assert shown("abc") == "'abc'"
    assert shown("x" * 1000) == repr("x" * 1000)[:MAX_SHOWN] + "..."
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert shown(deep) == "a list nested too deeply to show"
