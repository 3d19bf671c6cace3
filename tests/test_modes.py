"""Auto mode's judgement of upstream errors and its per-model memory."""

from __future__ import annotations

from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.modes import ModeBook, classify


def test_real_rejection_bodies_mean_tools_unsupported():
    for status, message in [
        (500, "tools param requires --jinja flag"),
        (500, "tool_choice param requires --jinja flag"),
        (400, "registry.ollama.ai/library/gemma:2b does not support tools"),
        (400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'),
        (500, "Unsupported param: tools"),
        (422, "This model does not support function calling"),
    ]:
        assert classify(UpstreamError(status, message)) == "tools_unsupported", message


def test_llama_cpp_parse_failures_are_recognised():
    for message in ["The model produced output that does not match the expected peg-native format",
                    "Failed to parse input at pos 184: <tool_call>", "Invalid diff: now finding less tool calls!"]:
        assert classify(UpstreamError(500, message)) == "upstream_parse_failure"


def test_unrelated_errors_never_flip():
    for status, message in [(500, "server overloaded, try later"), (503, "Loading model"),
                            (400, "the request exceeds the available context size"), (404, "model not found")]:
        assert classify(UpstreamError(status, message)) is None


def test_decisions_are_per_model_and_parse_failures_flip_after_threshold():
    book = ModeBook(parse_failure_threshold=2)
    book.settle("u", "a", "prompted", "tools_rejected")
    assert book.get("u", "a").mode == "prompted" and book.get("u", "b") is None
    assert book.parse_failure("u", "b") is False
    assert book.parse_failure("u", "b") is True
    assert book.get("u", "b").mode == "prompted"


def test_recheck_forgets_a_prompted_decision():
    now = [100.0]
    book = ModeBook(recheck_seconds=10, clock=lambda: now[0])
    book.settle("u", "a", "prompted", "tools_rejected")
    now[0] = 200.0
    assert book.get("u", "a") is None
