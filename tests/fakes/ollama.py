"""A scripted fake Ollama: a real HTTP server speaking Ollama's native API (and its /v1 layer) whose model's
answers a test queues in advance or leaves to a responder.

The shapes and errors follow Ollama's source (v0.33.0-rc2): api/types.go (ChatRequest, ChatResponse, Message,
ToolCall, Metrics, ShowResponse, ListResponse, ProcessResponse, EmbedResponse), server/routes.go (the routes,
ChatHandler, writeChatResponse, streamResponse, handleScheduleError), server/images.go (CheckCapabilities) and
openai/openai.go (the /v1 layer: ToChatCompletion, toChunk, FinishChunk, NewError).

A `Reply` is what the model does in one request: message pieces (content, thinking, native tool calls) streamed
in order, an error before any output, or an error once output began (the in-band `{"error"}` line). Every
request is recorded: the native chat bodies in `requests`, the /v1 ones in `v1_requests`, all in `seen`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.upstream import is_check

VERSION = "0.33.0"
NDJSON = "application/x-ndjson"
JSON_UTF8 = "application/json; charset=utf-8"

# The tool parsers' own errors (500 on /api/chat, ChatHandler's parserErr): model/parsers/qwen3.go and
# harmony/harmonyparser.go, each wrapping an encoding/json error.
QWEN3_PARSE_ERROR = "failed to parse JSON: unexpected end of JSON input"
HARMONY_PARSE_ERROR = "error parsing tool call: raw='{\"city\": \"Paris\"', err=unexpected end of JSON input"


def full_name(model: str) -> str:
    """model.Name as CheckCapabilities' caller writes it: the registry path and a tag."""
    name = model if ":" in model else model + ":latest"
    return name if "/" in name else "registry.ollama.ai/library/" + name


def no_tools_message(model: str) -> str:
    """scheduleRunner's `fmt.Errorf("%s %w", model.Name, err)` over errCapabilities and errCapabilityTools."""
    return f"{full_name(model)} does not support tools"


@dataclass
class ModelCard:
    """One pulled model: what /api/tags, /api/show and /api/ps say of it, and what it can do."""

    name: str
    family: str
    capabilities: list[str]
    context_length: int  # model_info `<arch>.context_length`: the trained length
    num_ctx: int | None = None  # a `num_ctx` line in the Modelfile's parameters
    template: str = "{{ .System }}{{ range .Messages }}{{ .Content }}{{ end }}"
    parameter_size: str = "1B"
    quantization: str = "Q4_K_M"


HERMES_TEMPLATE = ("{{- if .Tools }}<|im_start|>system\n# Tools\n<tools>{{ range .Tools }}{{ . }}{{ end }}</tools>\n"
                   "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
                   "<|im_end|>{{ end }}{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
                   "{{ end }}<|im_start|>assistant\n")

DEFAULT_MODELS = [
    ModelCard("qwen3:0.6b", "qwen3", ["completion", "tools", "thinking"], 40960, num_ctx=None,
              template=HERMES_TEMPLATE, parameter_size="751.63M"),
    ModelCard("llama3.2:1b", "llama", ["completion", "tools"], 131072, num_ctx=None, parameter_size="1.2B"),
    ModelCard("gemma:2b", "gemma", ["completion"], 8192, num_ctx=None, parameter_size="3B"),
]


@dataclass
class Reply:
    """One request's answer. `pieces` are message fragments in the order the model wrote them:
    {"thinking": s}, {"content": s} or {"tool_calls": [ToolCall]}."""

    pieces: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    error: str | None = None  # before any output: {"error": error} with `status`, streamed or not
    error_after: str | None = None  # once the pieces went out: the in-band line (non-stream: a 500 body)
    done_reason: str = "stop"
    delay: float = 0.0
    chunk_delay: float = 0.0
    prompt_eval_count: int = 26
    eval_count: int = 9


def tool_call(name: str, arguments: dict[str, Any], index: int = 0, call_id: str | None = None) -> dict[str, Any]:
    """api.ToolCall: `id` (omitempty; ChatHandler sets toolCallId()), `function.index` (always written),
    `function.arguments` an object."""
    call: dict[str, Any] = {"id": call_id} if call_id else {}
    call["function"] = {"index": index, "name": name, "arguments": arguments}
    return call


def say(text: str, thinking: str = "", size: int = 6) -> Reply:
    """Thinking (if any) streamed before the content, each in pieces of `size` characters."""
    pieces = [{"thinking": thinking[i:i + size]} for i in range(0, len(thinking), size)]
    pieces += [{"content": text[i:i + size]} for i in range(0, len(text), size)]
    return Reply(pieces=pieces)


def call(name: str, arguments: dict[str, Any], thinking: str = "", call_id: str = "call_4ppqdwzb") -> Reply:
    """A native call the way ChatHandler sends it: one object holding the whole call, content empty."""
    reply = say("", thinking)
    reply.pieces.append({"tool_calls": [tool_call(name, arguments, call_id=call_id)]})
    return reply


def fail(status: int, message: str) -> Reply:
    return Reply(status=status, error=message)


def fail_midstream(message: str, before: str = "Let me check.") -> Reply:
    reply = say(before)
    reply.error_after = message
    return reply


def now() -> str:
    """Go's time.Time in JSON: RFC 3339 with nanoseconds, UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def message(role: str = "assistant", content: str = "", thinking: str = "",
            tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """api.Message in its field order: content always, thinking and tool_calls omitempty."""
    out: dict[str, Any] = {"role": role, "content": content}
    if thinking:
        out["thinking"] = thinking
    if tool_calls:
        out["tool_calls"] = tool_calls
    return out


def chat_response(model: str, msg: dict[str, Any], done: bool, reply: Reply | None = None) -> dict[str, Any]:
    """api.ChatResponse; the metrics (omitempty) and done_reason only on the last object."""
    out: dict[str, Any] = {"model": model, "created_at": now(), "message": msg, "done": done}
    if done and reply is not None:
        out.update({"done_reason": reply.done_reason, "total_duration": 412_000_000, "load_duration": 31_000_000,
                    "prompt_eval_count": reply.prompt_eval_count, "prompt_eval_duration": 52_000_000,
                    "eval_count": reply.eval_count, "eval_duration": 318_000_000})
    return out


def gathered(reply: Reply) -> dict[str, Any]:
    """writeChatResponse with stream false: content and thinking joined, the calls appended in order."""
    content = "".join(p.get("content", "") for p in reply.pieces)
    thinking = "".join(p.get("thinking", "") for p in reply.pieces)
    calls = [c for p in reply.pieces for c in p.get("tool_calls", [])]
    return message(content=content, thinking=thinking, tool_calls=calls)


def ollama_error(status: int, text: str) -> Response:
    """gin's c.JSON(status, gin.H{"error": text})."""
    return Response(orjson.dumps({"error": text}), status, media_type=JSON_UTF8)


def text(status: int, body: str) -> Response:
    return Response(body.encode(), status, media_type="text/plain; charset=utf-8")


def _streams(body: dict[str, Any], default: bool) -> bool:
    stream = body.get("stream")
    return default if stream is None else bool(stream)


@dataclass
class FakeOllama:
    steps: deque[Reply] = field(default_factory=deque)
    responder: Callable[[dict[str, Any]], Reply] | None = None  # answers (the native body) when no step is queued
    checks: deque[Reply] = field(default_factory=deque)  # the proxy's own checks' answers (as FakeUpstream.checks)
    models: list[ModelCard] = field(default_factory=lambda: list(DEFAULT_MODELS))
    requests: list[dict[str, Any]] = field(default_factory=list)  # POST /api/chat bodies, as received
    v1_requests: list[dict[str, Any]] = field(default_factory=list)  # POST /v1/chat/completions bodies
    seen: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, parsed body or None): all
    headers: list[dict[str, str]] = field(default_factory=list)  # each `seen` request's headers
    disconnected: int = 0
    _paths: set[str] = field(default_factory=set)

    def push(self, *replies: Reply) -> None:
        self.steps.extend(replies)

    def card(self, name: str) -> ModelCard | None:
        wanted = name if ":" in name else name + ":latest"
        return next((m for m in self.models if m.name in (name, wanted)), None)

    def app(self) -> Starlette:
        routes = [
            Route("/", self.root, methods=["GET", "HEAD"]),
            Route("/api/version", self.version, methods=["GET", "HEAD"]),
            Route("/api/tags", self.tags, methods=["GET", "HEAD"]),
            Route("/api/show", self.show, methods=["POST"]),
            Route("/api/ps", self.ps, methods=["GET"]),
            Route("/api/chat", self.chat, methods=["POST"]),
            Route("/api/generate", self.generate, methods=["POST"]),
            Route("/api/embed", self.embed, methods=["POST"]),
            Route("/api/embeddings", self.embeddings, methods=["POST"]),
            Route("/v1/chat/completions", self.v1_chat, methods=["POST"]),
            Route("/v1/models", self.v1_models, methods=["GET"]),
            Route("/{path:path}", self.not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]),
        ]
        self._paths = {r.path for r in routes[:-1]}
        return Starlette(routes=routes)

    # --- recording and reading ------------------------------------------------------------------------------

    async def _read(self, request: Request) -> tuple[Any, Response | None]:
        """The JSON body (recorded), or gin's 400 for an empty or malformed one."""
        raw = await request.body()
        self.headers.append(dict(request.headers))
        if not raw:
            self.seen.append((request.method, request.url.path, None))
            return None, ollama_error(400, "missing request body")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.seen.append((request.method, request.url.path, raw))
            return None, ollama_error(400, "invalid character '" + raw.decode(errors="replace")[:1]
                                      + "' looking for beginning of value")
        self.seen.append((request.method, request.url.path, body))
        if not isinstance(body, dict):
            return None, ollama_error(400, "json: cannot unmarshal array into Go value of type api.ChatRequest")
        return body, None

    def _note(self, request: Request) -> None:
        self.seen.append((request.method, request.url.path, None))
        self.headers.append(dict(request.headers))

    async def not_found(self, request: Request) -> Response:
        """gin's NoRoute, or with HandleMethodNotAllowed its 405 for a known path."""
        self._note(request)
        if request.url.path in self._paths:
            return text(405, "405 method not allowed")
        return text(404, "404 page not found")

    # --- discovery -----------------------------------------------------------------------------------------

    async def root(self, request: Request) -> Response:
        self._note(request)
        return text(200, "Ollama is running")

    async def version(self, request: Request) -> Response:
        self._note(request)
        return Response(orjson.dumps({"version": VERSION}), media_type=JSON_UTF8)

    @staticmethod
    def details(card: ModelCard) -> dict[str, Any]:
        return {"parent_model": "", "format": "gguf", "family": card.family, "families": [card.family],
                "parameter_size": card.parameter_size, "quantization_level": card.quantization}

    async def tags(self, request: Request) -> Response:
        self._note(request)
        models = [{"name": m.name, "model": m.name, "modified_at": "2026-11-02T10:11:12.131415161Z",
                   "size": 522_653_767, "digest": f"{i:x}" * 64, "details": self.details(m)}
                  for i, m in enumerate(self.models, 1)]
        return Response(orjson.dumps({"models": models}), media_type=JSON_UTF8)

    async def show(self, request: Request) -> Response:
        body, error = await self._read(request)
        if error is not None:
            return error
        name = str(body.get("model") or body.get("name") or "")
        if not name:
            return ollama_error(400, "model is required")
        card = self.card(name)
        if card is None:
            return ollama_error(404, f"model '{name}' not found")
        parameters = 'stop                           "<|im_end|>"'
        if card.num_ctx is not None:
            parameters = f"num_ctx                        {card.num_ctx}\n" + parameters
        return Response(orjson.dumps({
            "modelfile": f"FROM {card.name}\n", "parameters": parameters, "template": card.template,
            "details": self.details(card),
            "model_info": {"general.architecture": card.family, "general.parameter_count": 751_632_384,
                           f"{card.family}.context_length": card.context_length,
                           f"{card.family}.embedding_length": 1024},
            "capabilities": card.capabilities, "modified_at": "2026-11-02T10:11:12.131415161Z"}),
            media_type=JSON_UTF8)

    async def ps(self, request: Request) -> Response:
        self._note(request)
        card = self.models[0]
        loaded = {"name": card.name, "model": card.name, "size": 1_213_000_000, "digest": "1" * 64,
                  "details": self.details(card), "expires_at": "2026-12-31T23:59:59.999999999Z",
                  "size_vram": 1_213_000_000, "context_length": card.num_ctx or 4096}
        return Response(orjson.dumps({"models": [loaded]}), media_type=JSON_UTF8)

    # --- inference besides chat ----------------------------------------------------------------------------

    async def generate(self, request: Request) -> Response:
        body, error = await self._read(request)
        if error is not None:
            return error
        model = str(body.get("model") or "")
        if self.card(model) is None:
            return ollama_error(404, f"model '{model}' not found")
        words = ["Sunny", " and", " mild."]

        def piece(response: str, done: bool) -> dict[str, Any]:
            out: dict[str, Any] = {"model": model, "created_at": now(), "response": response, "done": done}
            if done:
                out.update({"done_reason": "stop", "context": [1, 2, 3], "total_duration": 1000,
                            "prompt_eval_count": 4, "eval_count": 3})
            return out

        if not _streams(body, True):
            return Response(orjson.dumps(piece("".join(words), True)), media_type=JSON_UTF8)
        lines = [piece(w, False) for w in words] + [piece("", True)]
        return Response(b"".join(orjson.dumps(x) + b"\n" for x in lines), media_type=NDJSON)

    async def embed(self, request: Request) -> Response:
        body, error = await self._read(request)
        if error is not None:
            return error
        model = str(body.get("model") or "")
        if self.card(model) is None:
            return ollama_error(404, f"model '{model}' not found")
        given = body.get("input")
        inputs = given if isinstance(given, list) else [given]
        if not all(isinstance(x, str) for x in inputs):
            return ollama_error(400, "invalid input type")
        embeddings = [[round(0.01 * (len(x) % 7), 2), 0.5, -0.25] for x in inputs]
        return Response(orjson.dumps({"model": model, "embeddings": embeddings, "total_duration": 1000,
                                      "load_duration": 100, "prompt_eval_count": len(inputs)}),
                        media_type=JSON_UTF8)

    async def embeddings(self, request: Request) -> Response:
        body, error = await self._read(request)
        if error is not None:
            return error
        model = str(body.get("model") or "")
        if self.card(model) is None:
            return ollama_error(404, f"model '{model}' not found")
        return Response(orjson.dumps({"embedding": [0.1, 0.5, -0.25]}), media_type=JSON_UTF8)

    # --- chat ----------------------------------------------------------------------------------------------

    def _refusal(self, body: dict[str, Any]) -> tuple[int, str] | None:
        """ChatHandler's checks before the model runs, in its order."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return 400, "model is required"
        card = self.card(model)
        if card is None:
            return 404, f"model '{model}' not found"
        think = body.get("think")
        if "thinking" not in card.capabilities and think not in (None, False, "false"):
            return 400, f'"{model}" does not support thinking'
        if body.get("tools") and "tools" not in card.capabilities:
            return 400, no_tools_message(model)
        return None

    def _answer(self, body: dict[str, Any]) -> Reply:
        if is_check(body):  # never a step queued for a client
            if self.checks:
                return self.checks.popleft()
            if self.responder is None:
                return call("sanctum_check", {})
        elif self.steps:
            return self.steps.popleft()
        if self.responder is not None:
            card = self.card(str(body.get("model")))
            if card is not None and "thinking" in card.capabilities and body.get("think") is None:
                body = {**body, "think": True}  # ChatHandler: a thinking model thinks unless told not to
            return self.responder(body)
        return say("default answer")

    async def chat(self, request: Request) -> Response:
        body, error = await self._read(request)
        if error is not None:
            return error
        self.requests.append(body)
        refused = self._refusal(body)
        if refused is not None:
            return ollama_error(*refused)
        model = body["model"]
        if not body.get("messages"):  # a load request
            return Response(orjson.dumps({**chat_response(model, message(), True), "done_reason": "load"}),
                            media_type=JSON_UTF8)
        reply = self._answer(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:  # nothing written yet: c.JSON(status, ...) even when streaming
            return ollama_error(reply.status, reply.error)
        if not _streams(body, True):
            if reply.error_after is not None:
                return ollama_error(500, reply.error_after)
            return Response(orjson.dumps(chat_response(model, gathered(reply), True, reply)), media_type=JSON_UTF8)
        return StreamingResponse(self._ndjson(model, reply), media_type=NDJSON)

    async def _ndjson(self, model: str, reply: Reply):  # type: ignore[no-untyped-def]
        try:
            for piece in reply.pieces:
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                msg = message(content=piece.get("content", ""), thinking=piece.get("thinking", ""),
                              tool_calls=piece.get("tool_calls"))
                yield orjson.dumps(chat_response(model, msg, False)) + b"\n"
            if reply.error_after is not None:  # json.NewEncoder(...).Encode(gin.H{"error": e}), then the end
                yield orjson.dumps({"error": reply.error_after}) + b"\n"
                return
            yield orjson.dumps(chat_response(model, message(), True, reply)) + b"\n"
        except asyncio.CancelledError:
            self.disconnected += 1
            raise

    # --- the OpenAI layer (middleware/openai.go over ChatHandler) ------------------------------------------

    async def v1_models(self, request: Request) -> Response:
        self._note(request)
        data = [{"id": m.name, "object": "model", "created": 1762078272, "owned_by": "library"} for m in self.models]
        return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")

    async def v1_chat(self, request: Request) -> Response:
        raw = await request.body()
        self.headers.append(dict(request.headers))
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.seen.append((request.method, request.url.path, raw))
            return v1_error(400, "invalid request")
        self.seen.append((request.method, request.url.path, body))
        self.v1_requests.append(body)
        native = from_chat_request(body)
        refused = self._refusal(native)
        if refused is not None:
            return v1_error(*refused)
        reply = self._answer(native)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:
            return v1_error(reply.status, reply.error)
        model = native["model"]
        if not body.get("stream"):
            if reply.error_after is not None:
                return v1_error(500, reply.error_after)
            return Response(orjson.dumps(to_chat_completion(model, reply)), media_type="application/json")
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(self._sse(model, reply, usage), media_type="text/event-stream")

    async def _sse(self, model: str, reply: Reply, usage: bool):  # type: ignore[no-untyped-def]
        try:
            for chunk in to_chunks(model, reply, usage):
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            if reply.error_after is None:
                yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.disconnected += 1
            raise


def v1_error(status: int, message_: str) -> Response:
    """openai.NewError: the type by status."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return Response(orjson.dumps({"error": {"message": message_, "type": kind, "param": None, "code": None}}),
                    status, media_type="application/json")


EFFORT = {"none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high", "max": "max",
          "xhigh": "max", "ultra": "max"}


def from_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """openai.FromChatRequest: arguments parsed into objects, content parts joined, a tool result named by its
    call, the sampling fields into options with temperature and top_p 1.0 where the client sent none, `format`
    from response_format, `think` from the reasoning effort."""
    messages, names = [], {}
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out: dict[str, Any] = {"role": m.get("role"), "content": content or ""}
        calls = []
        for i, c in enumerate(m.get("tool_calls") or []):
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            calls.append(tool_call(str(fn.get("name")), args, i, c.get("id")))
            names[c.get("id")] = fn.get("name")
        if calls:
            out["tool_calls"] = calls
        if m.get("role") == "tool":
            out["tool_name"] = m.get("name") or names.get(m.get("tool_call_id"), "")
        messages.append(out)
    options: dict[str, Any] = {}
    if isinstance(body.get("stop"), str | list):
        options["stop"] = [body["stop"]] if isinstance(body["stop"], str) else body["stop"]
    if body.get("max_tokens") is not None:
        options["num_predict"] = body["max_tokens"]
    options["temperature"] = body["temperature"] if body.get("temperature") is not None else 1.0
    for key in ("seed", "frequency_penalty", "presence_penalty"):
        if body.get(key) is not None:
            options[key] = body[key]
    options["top_p"] = body["top_p"] if body.get("top_p") is not None else 1.0
    native: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": bool(body.get("stream")),
                              "options": options}
    if body.get("tools"):
        native["tools"] = body["tools"]
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        native["format"] = (fmt.get("json_schema") or {}).get("schema", {})
    elif fmt.get("type") == "json_object":
        native["format"] = "json"
    effort = (body.get("reasoning") or {}).get("effort") or body.get("reasoning_effort")
    if effort in EFFORT:
        native["think"] = EFFORT[effort]
    return native


def _v1_calls(calls: list[dict[str, Any]], with_index: bool) -> list[dict[str, Any]]:
    """openai.ToToolCalls: arguments marshalled back to a string."""
    out = []
    for c in calls:
        fn = c["function"]
        one: dict[str, Any] = {"id": c.get("id", ""), "type": "function",
                               "function": {"name": fn["name"], "arguments": json.dumps(fn["arguments"],
                                                                                         separators=(",", ":"))}}
        if with_index:
            one = {"index": fn.get("index", 0), **one}
        out.append(one)
    return out


def to_chat_completion(model: str, reply: Reply) -> dict[str, Any]:
    msg = gathered(reply)
    calls = _v1_calls(msg.get("tool_calls", []), with_index=False)
    reason = "tool_calls" if reply.done_reason == "stop" and calls else reply.done_reason
    out_msg: dict[str, Any] = {"role": "assistant", "content": msg["content"]}
    if msg.get("thinking"):
        out_msg["reasoning"] = msg["thinking"]
    if calls:
        out_msg["tool_calls"] = calls
    return {"id": "chatcmpl-314", "object": "chat.completion", "created": int(time.time()), "model": model,
            "system_fingerprint": "fp_ollama", "choices": [{"index": 0, "message": out_msg, "finish_reason": reason}],
            "usage": {"prompt_tokens": reply.prompt_eval_count, "completion_tokens": reply.eval_count,
                      "total_tokens": reply.prompt_eval_count + reply.eval_count}}


def to_chunks(model: str, reply: Reply, usage: bool) -> list[dict[str, Any]]:
    """toChunk per native object (role on the first), then FinishChunk and the usage chunk; a mid-stream error
    is the lost-error chunk (tests/fakes/upstream.py ollama_v1_stream_lost_error) and nothing after it."""
    base = {"id": "chatcmpl-314", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "system_fingerprint": "fp_ollama"}
    out, sent_call = [], False
    for i, piece in enumerate(reply.pieces):
        delta: dict[str, Any] = {"role": "assistant"} if i == 0 else {}
        if "thinking" in piece:
            delta["reasoning"] = piece["thinking"]
        else:
            delta["content"] = piece.get("content", "")
        if piece.get("tool_calls"):
            delta["tool_calls"] = _v1_calls(piece["tool_calls"], with_index=True)
            sent_call = True
        out.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    if reply.error_after is not None:
        out.append({**base, "model": "", "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]})
        return out
    reason = "tool_calls" if reply.done_reason == "stop" and sent_call else reply.done_reason
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if usage:
        out.append({**base, "choices": [], "usage": {"prompt_tokens": reply.prompt_eval_count,
                                                     "completion_tokens": reply.eval_count,
                                                     "total_tokens": reply.prompt_eval_count + reply.eval_count}})
    return out
