"""A scripted fake llama.cpp / Ollama: a real HTTP server whose answers a test queues in advance.

Each queued `Step` answers one request to /v1/chat/completions: a JSON body with a status, an SSE stream of
chunks (with optional delays), or a connection that dies mid-answer. Every request received is recorded. With no
step queued, a `responder` (request body -> Step) answers instead: a model that reads the conversation, for the
multi-turn tool loops of tests/clients.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

LLAMA_NO_JINJA = (500, {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}})
OLLAMA_NO_TOOLS = (400, {"error": {"message": "registry.ollama.ai/library/gemma:2b does not support tools",
                                   "type": "api_error", "param": None, "code": None}})
# llama.cpp's chat endpoint refuses n != 1 (tools/server: oaicompat_chat_params_parse throws
# "Only one completion choice is allowed", answered as an invalid_request_error). Ollama ignores n: one choice.
LLAMA_ONE_CHOICE = (400, {"error": {"code": 400, "message": "Only one completion choice is allowed",
                                    "type": "invalid_request_error"}})



# The error answers of an upstream whose own tool parser failed, as each server writes them (the messages and their
# sources: sanctum_proxy/repair/upstream_errors.py, the table in docs/contract.md section 4).
def llama_error(message: str) -> tuple[int, dict[str, Any]]:
    """llama-server: a std::runtime_error in the handler (tools/server/server.cpp ex_wrapper) is a 500 with
    format_error_response's body, keys in this order."""
    return 500, {"error": {"code": 500, "message": message, "type": "server_error"}}


def llama_stream_error(message: str) -> bytes:
    """llama-server after the first chunk: the error as one SSE event, and the stream ends without [DONE]."""
    return b"data: " + orjson.dumps({"error": {"code": 500, "message": message, "type": "server_error"}}) + b"\n\n"


def ollama_v1_error(message: str) -> tuple[int, dict[str, Any]]:
    """Ollama /v1: a parser error reaches server/routes.go writeChatResponse as gin.H{"error"} (500), and
    middleware/openai.go writeError wraps it in openai.NewError (type api_error for a 500)."""
    return 500, {"error": {"message": message, "type": "api_error", "param": None, "code": None}}


def ollama_v1_stream_lost_error(created: int = 1) -> dict[str, Any]:
    """Ollama /v1 once a stream has begun: a parser error reaches server/routes.go streamResponse as gin.H{"error"},
    which (the response already written) JSON-encodes `{"error": "..."}` into middleware/openai.go's ChatWriter;
    with the status still 200, writeResponse unmarshals it as an api.ChatResponse (no field matches: no model, no
    message) and writes it as a chunk: the stream's id and created, model "", delta `{"content": ""}` (no role
    after the first chunk). Then streamResponse returns false and the body ends cleanly: no finish chunk, no
    [DONE] (Step(done=False)). The error's message is lost (ollama fb30760, v0.33.0-rc2)."""
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": "",
            "system_fingerprint": "fp_ollama", "choices": [{"index": 0, "delta": {"content": ""},
                                                            "finish_reason": None}]}


def ollama_api_error(message: str) -> tuple[int, dict[str, Any]]:
    """Ollama /api/chat (native): the same error as {"error": "..."}."""
    return 500, {"error": message}


def vllm_error(message: str) -> tuple[int, dict[str, Any]]:
    """vLLM: an exception in the chat handler (openai_harmony's HarmonyError for gpt-oss) answered by
    create_error_response as an InternalServerError."""
    return 500, {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}

def vllm_history_error(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """vLLM before generating: vllm/entrypoints/chat_utils.py `_postprocess_messages` json.loads every non-empty
    string `arguments` of an assistant's tool_calls, and the JSONDecodeError is answered as a 400 BadRequestError
    with the decoder's message (the body quoted in vllm-project/vllm#43995; #47761: "Unterminated string
    starting at: line 1 column 14 (char 13)")."""
    for message in body.get("messages", []):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            arguments = (call.get("function") or {}).get("arguments")
            if arguments and not isinstance(arguments, (dict, list)):
                try:
                    json.loads(arguments)
                except json.JSONDecodeError as exc:
                    return 400, {"error": {"message": str(exc), "type": "BadRequestError", "param": None, "code": 400}}
    return None


@dataclass
class Step:
    status: int = 200
    body: Any = None
    chunks: list[Any] | None = None  # dicts become `data: {json}`; bytes are sent raw
    delay: float = 0.0  # before the answer
    chunk_delay: float = 0.0
    die_after: int | None = None  # close the connection after this many chunks
    endless: Any = None  # after `chunks`, send this piece (dict or bytes) forever, every chunk_delay
    done: bool = True  # end the stream with [DONE] (Ollama /v1 ends one whose parser failed without it)


def completion(content: str | None = "", tool_calls: list[dict[str, Any]] | None = None,
               finish_reason: str = "stop", model: str = "fake-model") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def several(*messages: dict[str, Any], finish_reasons: list[str] | None = None) -> dict[str, Any]:
    """A chat.completion of n choices, the way vLLM and OpenAI answer `n`: one choice per message, by index,
    one usage for them all."""
    body = completion("")
    reasons = finish_reasons or ["tool_calls" if m.get("tool_calls") else "stop" for m in messages]
    body["choices"] = [{"index": i, "message": {"role": "assistant", **m}, "logprobs": None, "finish_reason": r}
                       for i, (m, r) in enumerate(zip(messages, reasons, strict=True))]
    tokens = 5 * len(messages)
    body["usage"] = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
    return body


def several_chunks(*texts: str, size: int = 4) -> list[dict[str, Any]]:
    """A stream of n choices the way vLLM sends it: one choice per chunk, each choice's role chunk first, the
    choices' content chunks interleaved round-robin, a finish chunk per choice, then one usage chunk."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}

    def one(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [one(i, {"role": "assistant", "content": ""}) for i in range(len(texts))]
    pieces = [[t[j:j + size] for j in range(0, len(t), size)] for t in texts]
    for step in range(max(len(p) for p in pieces)):
        out += [one(i, {"content": p[step]}) for i, p in enumerate(pieces) if step < len(p)]
    out += [one(i, {}, "stop") for i in range(len(texts))]
    out.append({**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5 * len(texts),
                                                 "total_tokens": 10 + 5 * len(texts)}})
    return out


def native_call(name: str, arguments: str, call_id: str = "call_abc") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def content_chunks(text: str, size: int = 4) -> list[dict[str, Any]]:
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    out = [{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]}]
    out += [{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
             "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    out.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


def llama_tool_chunks(name: str, arguments: str, size: int = 5) -> list[dict[str, Any]]:
    """llama.cpp style: the name first (id, type), argument fragments after, then finish tool_calls."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
           {**base, "choices": [{"index": 0, "delta": {"tool_calls": [
               {"index": 0, "id": "Xy12", "type": "function", "function": {"name": name}}]}, "finish_reason": None}]}]
    for i in range(0, len(arguments), size):
        out.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": arguments[i:i + size]}}]}, "finish_reason": None}]})
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return out


def is_check(body: dict[str, Any]) -> bool:
    """The proxy's own request to check a lesson (upstreams/lesson_checks.py), OpenAI's or Ollama's: no client text."""
    messages = body.get("messages")
    return (isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], dict)
            and messages[0].get("role") == "user" and messages[0].get("content") == "Call sanctum_check now.")


def asked(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The clients' rounds among a fake's requests, the proxy's own checks left out."""
    return [body for body in requests if not is_check(body)]


def checked(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The proxy's own checks among a fake's requests."""
    return [body for body in requests if is_check(body)]


@dataclass
class FakeUpstream:
    steps: deque[Step] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    other_requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    disconnected: int = 0
    props: Any = None  # llama.cpp's GET /props answer; None: 404 like Ollama / vLLM
    show: Any = None  # Ollama's POST /api/show answer; None: 404 like llama.cpp / vLLM
    probes: list[str] = field(default_factory=list)
    chunks_sent: int = 0  # stream pieces sent so far (a test can see that the upstream is still talking)
    stray: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of requests outside /v1: 404s
    other_headers: list[dict[str, str]] = field(default_factory=list)  # the headers of each other_requests entry
    responder: Callable[[dict[str, Any]], Step] | None = None  # answers when no step is queued
    # llama.cpp's POST /apply-template ({"prompt"}: the request in its chat template) and POST /tokenize
    # ({"tokens": [ids]}); off: 404 like Ollama and vLLM. The "template" is a line per message, the tokens words
    tokenizer: bool = False
    templated: list[dict[str, Any]] = field(default_factory=list)  # the bodies POST /apply-template got
    chat_headers: list[dict[str, str]] = field(default_factory=list)  # the headers of each `requests` entry
    reads_history: bool = False  # vLLM: a history call whose arguments are not JSON is a 400 (vllm_history_error)
    # The proxy's own checks (its "Call sanctum_check now." request) run beside a client's rounds, so they take their
    # answers from here, else from `responder`, else a model whose tools work: never a step queued for a client
    checks: deque[Step] = field(default_factory=deque)

    def push(self, *steps: Step) -> None:
        self.steps.extend(steps)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.chat, methods=["POST"]),  # the legacy API: passed through as it is
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/props", self.answer_props, methods=["GET"]),
            Route("/api/show", self.answer_show, methods=["POST"]),
            Route("/apply-template", self.apply_template, methods=["POST"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/v1/{path:path}", self.echo, methods=["GET", "POST", "PUT", "DELETE"]),
            Route("/{path:path}", self.outside, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
        ])

    async def outside(self, request: Request) -> Response:
        """Ollama's /api/*, llama.cpp's /slots...: recorded (the proxy must never send a client here), 404."""
        self.stray.append((request.method, request.url.path))
        return Response(b"404 page not found", 404, media_type="text/plain")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def answer_props(self, request: Request) -> Response:
        self.probes.append("props")
        if self.props is None:
            return JSONResponse({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)
        return JSONResponse(self.props)

    async def answer_show(self, request: Request) -> Response:
        self.probes.append("show:" + str(orjson.loads(await request.body()).get("model")))
        if self.show is None:
            return Response(b"404 page not found", 404, media_type="text/plain")
        return JSONResponse(self.show)

    async def apply_template(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.templated.append(body)
        if not self.tokenizer:
            return JSONResponse({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)
        lines = [f"<|{m.get('role')}|> {m.get('content')}" for m in body.get("messages", [])]
        return JSONResponse({"prompt": "\n".join(lines) + "\n<|assistant|>"})

    async def tokenize(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        if not self.tokenizer:
            return JSONResponse({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)
        return JSONResponse({"tokens": list(range(len(str(body.get("content", "")).split())))})

    async def echo(self, request: Request) -> Response:
        body = await request.body()
        self.other_requests.append((request.method, request.url.path, body))
        self.other_headers.append(dict(request.headers))
        return Response(orjson.dumps({"method": request.method, "path": request.url.path,
                                      "query": str(request.url.query), "body": body.decode()}),
                        status_code=201 if request.method == "POST" else 200, media_type="application/json",
                        headers={"x-upstream": "yes"})

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        self.chat_headers.append(dict(request.headers))
        refused = vllm_history_error(body) if self.reads_history else None
        if refused is not None:
            return JSONResponse(refused[1], status_code=refused[0])
        if is_check(body):
            step = (self.checks.popleft() if self.checks else self.responder(body) if self.responder is not None
                    else Step(body=completion(None, [native_call("sanctum_check", "{}")])))
        elif self.steps:
            step = self.steps.popleft()
        elif self.responder is not None:
            step = self.responder(body)
        else:
            step = Step(body=completion("default answer"))
        if step.delay:
            await asyncio.sleep(step.delay)
        if isinstance(step.body, bytes):  # sent as it is: not JSON, not UTF-8, whatever the test needs
            return Response(step.body, status_code=step.status, media_type="application/json")
        if step.chunks is None:
            return JSONResponse(step.body, status_code=step.status)
        return StreamingResponse(self._stream(step), media_type="text/event-stream")

    async def _stream(self, step: Step):  # type: ignore[no-untyped-def]
        try:
            for i, piece in enumerate(step.chunks or []):
                if step.die_after is not None and i >= step.die_after:
                    raise ConnectionResetError("fake upstream dies mid-stream")
                if step.chunk_delay:
                    await asyncio.sleep(step.chunk_delay)
                yield piece if isinstance(piece, bytes) else b"data: " + orjson.dumps(piece) + b"\n\n"
                self.chunks_sent += 1
            while step.endless is not None:
                await asyncio.sleep(step.chunk_delay)
                piece = step.endless
                yield piece if isinstance(piece, bytes) else b"data: " + orjson.dumps(piece) + b"\n\n"
            if step.die_after is None and step.done:
                yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.disconnected += 1
            raise


# --- standalone: `python -m tests.fakes.upstream --port N` (a fake Ollama for the container tier) ------------

# What a small model behind Ollama writes when its template does not parse its own call: the Hermes call left
# in content, with Python quoting and a trailing comma (tier 1 mends it into tool_calls).
BROKEN_HERMES = "<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Paris',}}\n</tool_call>"


def ollama_responder(body: dict[str, Any]) -> Step:
    """An Ollama serving two models, the way its OpenAI-compatible endpoint answers: a model whose template
    has no tools (`gemma*`) refuses `tools` with Ollama's 400; every other model, asked with tools (native,
    or prompted: the tools in the system prompt), writes a broken Hermes call into content; without tools it
    answers in words."""
    model = str(body.get("model", ""))
    if body.get("tools") and model.startswith("gemma"):
        return Step(status=OLLAMA_NO_TOOLS[0], body=OLLAMA_NO_TOOLS[1])
    text = orjson.dumps(body.get("messages", [])).decode()
    if body.get("tools") or "<tool_call>" in text:
        return Step(body=completion(BROKEN_HERMES, model=model))
    return Step(body=completion("Sunny.", model=model))


def main(argv: list[str] | None = None) -> None:
    import argparse

    import uvicorn

    p = argparse.ArgumentParser(description="The scripted fake upstream as a server: a fake Ollama (see "
                                            "ollama_responder); GET /fake/requests lists the chat bodies it got.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=11434)
    args = p.parse_args(argv)
    upstream = FakeUpstream(responder=ollama_responder)
    app = upstream.app()

    async def recorded(request: Request) -> Response:
        return JSONResponse(upstream.requests)

    app.router.routes.insert(0, Route("/fake/requests", recorded, methods=["GET"]))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
