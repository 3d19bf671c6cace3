"""An upstream's error answer as the proxy's error: its own message from the shapes real servers send
(llama.cpp and OpenAI `{"error": {"message"}}`, Ollama `{"error": "..."}`, FastAPI's `{"detail"}`, plain text),
clipped, and the HTTP client's own failures without the upstream's address."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from sanctum_proxy.errors import UpstreamTimeout, UpstreamUnreachable
from sanctum_proxy.upstreams.error_mapping import MAX_ERROR_TEXT, error_message, mapped_errors, upstream_error

# llama.cpp tools/server utils.hpp format_error_response; Ollama server/routes.go; FastAPI HTTPException (vLLM)
LLAMA = {"error": {"code": 400, "message": "the request exceeds the available context size", "type":
                   "exceed_context_size_error", "n_prompt_tokens": 312, "n_ctx": 150}}
OLLAMA = {"error": "model 'nope' not found"}
FASTAPI = {"detail": "Not Found"}


@pytest.mark.parametrize(("body", "message"), [
    (orjson.dumps(LLAMA), "the request exceeds the available context size"),
    (orjson.dumps(OLLAMA), "model 'nope' not found"),
    (orjson.dumps(FASTAPI), "Not Found"),
    (b"502 Bad Gateway\n", "502 Bad Gateway"),
    (b"", "upstream error with an empty body"),
])
def test_the_upstreams_own_message_is_read_from_each_shape(body, message):
    assert error_message(body) == message


def test_the_error_keeps_its_scalar_fields_clipped_and_drops_nested_ones():
    body = orjson.dumps({"error": {**LLAMA["error"], "details": {"deep": [1]}, "message": "x" * 5000}})
    error = upstream_error(400, body)
    assert error.status == 400 and len(error.message) == MAX_ERROR_TEXT + 3
    fields = error.extra()
    assert fields["upstream_type"] == "exceed_context_size_error" and fields["n_ctx"] == 150
    assert "details" not in fields and fields["upstream_status"] == 400


def test_client_failures_become_502_and_504_without_the_upstreams_address():
    async def fail(exc: BaseException) -> None:
        async with mapped_errors():
            raise exc

    refused = ConnectionRefusedError(111, "Connect call failed ('10.1.2.3', 8080)")  # asyncio's own wording
    with pytest.raises(UpstreamUnreachable) as unreachable:
        asyncio.run(fail(refused))
    assert "10.1.2.3" not in unreachable.value.message and "Connection refused" in unreachable.value.message
    with pytest.raises(UpstreamTimeout):
        asyncio.run(fail(TimeoutError()))
