"""What a client got from the proxy: each exchange recorded around the app, and read by `verdict` as a complete
answer in the endpoint's shape or a clear error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
CLEAR_ERRORS = {"context_length_exceeded", "spell_call_parse_error"}  # docs/contract.md section 7


@dataclass
class Exchange:
    method: str
    path: str
    request: bytes = b""
    status: int = 0
    response: bytes = b""
    done: bool = False  # the body's last part was sent
    left: bool = False  # the client went away first

    def body(self) -> Any:
        return json.loads(self.request) if self.request else None

    def error(self) -> Message:
        """The error object of an error answer."""
        return dict(_json(self.response)["error"])


@dataclass
class Recorder:
    app: Any
    exchanges: list[Exchange] = field(default_factory=list)

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = Exchange(scope["method"], scope["path"])
        self.exchanges.append(exchange)

        async def reading() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                exchange.request += message.get("body", b"")
            elif message["type"] == "http.disconnect" and not exchange.done:
                exchange.left = True
            return dict(message)

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
            elif message["type"] == "http.response.body":
                exchange.response += message.get("body", b"")
                exchange.done = not message.get("more_body", False)
            await send(message)

        await self.app(scope, reading, recording)

    def rounds(self) -> list[Exchange]:
        """The model requests (chat completions, Messages, Responses), in order."""
        return [e for e in self.exchanges if e.method == "POST" and e.path.rstrip("/").endswith(
            ("/chat/completions", "/v1/messages", "/v1/responses"))]


def verdict(exchange: Exchange) -> str:
    """`answer`, `call`, a clear error's code, `listing` (GET) or `left` (the client hung up); else AssertionError:
    a cut stream, a call to a tool not offered, arguments that are no object, any other error."""
    if exchange.left and not exchange.done:
        return "left"
    assert exchange.done, f"{exchange.path}: the response never ended"
    if exchange.status >= 400:
        error = exchange.error()
        code = error.get("code") or error.get("type")
        assert exchange.status < 500 and code in CLEAR_ERRORS, (exchange.status, error)
        return str(code)
    assert exchange.status == 200, (exchange.status, exchange.response[:500])
    if exchange.method == "GET":
        _json(exchange.response)
        return "listing"
    body = exchange.body()
    offered = {_tool_name(t) for t in body.get("tools") or []}
    if not body.get("stream"):
        return _answer(exchange.path, _json(exchange.response), offered)
    events = [_json(line[5:]) for line in exchange.response.decode().splitlines()
              if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    failed = [e.get("error", e) for e in events if "error" in e or e.get("type") == "error"]
    if failed:  # an error mid-stream ends it
        assert events[-1].get("type") == "response.failed" or "error" in events[-1], events[-2:]
        assert failed[-1].get("code") in CLEAR_ERRORS, failed[-1]
        return str(failed[-1]["code"])
    if exchange.path.endswith("/chat/completions"):
        assert exchange.response.rstrip().endswith(b"data: [DONE]"), exchange.response[-300:]
        return _chat_stream(events, offered)
    if exchange.path.endswith("/messages"):
        return _messages_stream(events, offered)
    return _responses_stream(events, offered)


def _json(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AssertionError(f"not JSON: {text[:300]!r}") from exc


def _tool_name(tool: Message) -> str:
    return str((tool.get("function") or tool).get("name"))


def _call(name: str, arguments: str, offered: set[str]) -> None:
    assert name in offered, (name, sorted(offered))
    assert isinstance(_json(arguments or "{}"), dict), arguments


def _chat_stream(chunks: list[Message], offered: set[str]) -> str:
    calls: dict[int, list[str]] = {}
    finished = False
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            finished = finished or bool(choice.get("finish_reason"))
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                named = calls.setdefault(call["index"], ["", ""])
                named[0] += call.get("function", {}).get("name") or ""
                named[1] += call.get("function", {}).get("arguments") or ""
    assert finished, chunks[-3:]
    for name, arguments in calls.values():
        _call(name, arguments, offered)
    return "call" if calls else "answer"


def _messages_stream(events: list[Message], offered: set[str]) -> str:
    types = [e.get("type") for e in events]
    assert "error" not in types and types[-1] == "message_stop", types
    blocks: dict[int, list[str]] = {}
    for event in events:
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
            blocks[event["index"]] = [event["content_block"]["name"], ""]
        elif event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta":
            blocks[event["index"]][1] += event["delta"]["partial_json"]
    for name, arguments in blocks.values():
        _call(name, arguments, offered)
    return "call" if blocks else "answer"


def _responses_stream(events: list[Message], offered: set[str]) -> str:
    types = [e.get("type") for e in events]
    assert "error" not in types and "response.failed" not in types and types[-1] == "response.completed", types
    return _answer("/v1/responses", events[-1]["response"], offered)


def _answer(path: str, answer: Message, offered: set[str]) -> str:
    if path.endswith("/chat/completions"):
        calls = [(c["function"]["name"], c["function"]["arguments"]) for choice in answer["choices"]
                 for c in choice["message"].get("tool_calls") or []]
    elif path.endswith("/messages"):
        calls = [(b["name"], json.dumps(b["input"])) for b in answer["content"] if b["type"] == "tool_use"]
    else:
        calls = [(o["name"], o["arguments"]) for o in answer["output"] if o["type"] == "function_call"]
    for name, arguments in calls:
        _call(name, arguments, offered)
    return "call" if calls else "answer"
