"""A fast scripted upstream for the benchmarks: a raw asyncio HTTP/1.1 server on loopback (keep-alive,
content-length and chunked request bodies) that answers every POST .../chat/completions with canned bytes.

    non-streaming   a chat.completion whose message holds one valid call of the request's first tool
                    (`get_weather` when it offers none; arguments its schema's required properties)
    streaming       SSE: a role chunk, content in pieces, the call (name, then argument fragments),
                    finish_reason tool_calls, a usage chunk when asked, [DONE]

`--chunk-delay S` sleeps between SSE events (the memory benchmark's slow streams); `--chunks N` repeats the
content piece N times. A body whose `user` field is `"think-ms-N"` is answered after N ms (a model's time;
`user` is a standard field every proxy passes through unchanged). GET /v1/models answers a one-model list;
anything else is a 404 JSON error.

    python bench/canned_upstream.py --port 9000 [--chunk-delay 0] [--chunks 4]

It is deliberately not starlette/uvicorn: the direct baseline should cost as little as possible, so that
what a proxy adds is not hidden by a slow upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from typing import Any

MODEL = "bench-model"
CITY_ARGS = '{"city": "Paris", "unit": "celsius"}'
TOOLS: list[dict[str, Any]] = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}]
CONTENT_PIECE = "Checking the weather. "
THINK = re.compile(rb'"user"\s*:\s*"think-ms-(\d+)"')


def completion_body(name: str = "get_weather", arguments: str = CITY_ARGS) -> bytes:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62},
    }).encode()


def stream_events(pieces: int, usage: bool, name: str = "get_weather", arguments: str = CITY_ARGS) -> list[bytes]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    out = [event({"role": "assistant", "content": None})]
    out += [event({"content": CONTENT_PIECE}) for _ in range(pieces)]
    out.append(event({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": name, "arguments": ""}}]}))
    out += [event({"tool_calls": [{"index": 0, "function": {"arguments": arguments[i:i + 12]}}]})
            for i in range(0, len(arguments), 12)]
    out.append(event({}, "tool_calls"))
    if usage:
        usage_counts = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
        tail = {**base, "choices": [], "usage": usage_counts}
        out.append(b"data: " + json.dumps(tail).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def example(schema: Any) -> Any:
    """A value valid against a plain JSON schema: its required properties filled, enums at their first value."""
    if not isinstance(schema, dict):
        return "x"
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example(schema[key][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: example(props.get(k, {})) for k in schema.get("required") or []}
    return {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": [], "null": None}.get(kind, "x")


def first_tool_call(body: bytes) -> tuple[str, str] | None:
    """(name, arguments) of a valid call of the request's first function tool, None when it offers none."""
    try:
        tools = json.loads(body).get("tools") or []
    except (ValueError, AttributeError):
        return None
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name"):
            return function["name"], json.dumps(example(function.get("parameters") or {}))
    return None


def response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {200: b"OK", 404: b"Not Found"}.get(status, b"Error")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, reason, content_type, len(body)) + body)


class Canned:
    def __init__(self, chunk_delay: float = 0.0, pieces: int = 4) -> None:
        self.chunk_delay = chunk_delay
        self.pieces = pieces
        self.completion = response(200, completion_body())
        self.models = response(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                               .encode())
        self.missing = response(404, b'{"error": {"message": "not found", "type": "not_found_error"}}')
        self.events = {usage: stream_events(pieces, usage) for usage in (False, True)}
        self.answers: dict[bytes, tuple[bytes, dict[bool, list[bytes]]]] = {}

    def answer(self, body: bytes) -> tuple[bytes, dict[bool, list[bytes]]]:
        """The canned answers for this request's tools: a call of its first tool (kept per tool list)."""
        at = body.find(b'"tools"')
        key = body[at:at + 2000] if at >= 0 else b""
        if key not in self.answers:
            call = first_tool_call(body) if at >= 0 else None
            if call is None or call[0] == "get_weather":
                self.answers[key] = self.completion, self.events
            else:
                self.answers[key] = (response(200, completion_body(*call)),
                                     {u: stream_events(self.pieces, u, *call) for u in (False, True)})
        return self.answers[key]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    return
                method, path, body = request
                if method == b"POST" and path.endswith(b"/chat/completions"):
                    if (think := THINK.search(body)) is not None:
                        await asyncio.sleep(int(think.group(1)) / 1000)
                    completion, events = self.answer(body)
                    if b'"stream":true' in body or b'"stream": true' in body:
                        usage = b'"include_usage":true' in body or b'"include_usage": true' in body
                        await self.stream(writer, events[usage])
                    else:
                        writer.write(completion)
                elif method == b"GET" and path.endswith(b"/models"):
                    writer.write(self.models)
                else:
                    writer.write(self.missing)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def stream(self, writer: asyncio.StreamWriter, events: list[bytes]) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for event in events:
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes, bytes] | None:
    """(method, path, body) of the next request on the connection, None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.split(b"\r\n")
    method, path, _ = lines[0].split(b" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = bytearray()
        while (size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)) > 0:
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")  # the empty trailer section
        return method, path, bytes(body)
    return method, path, await reader.readexactly(int(headers.get(b"content-length", b"0")))


async def serve(port: int, chunk_delay: float, pieces: int) -> None:
    canned = Canned(chunk_delay, pieces)
    server = await asyncio.start_server(canned.handle, "127.0.0.1", port, backlog=4096)
    print(f"canned upstream on http://127.0.0.1:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="canned OpenAI-compatible upstream for the benchmarks")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between SSE events")
    parser.add_argument("--chunks", type=int, default=4, help="content pieces before the call")
    args = parser.parse_args(argv)
    run = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        pass
    try:
        run(serve(args.port, args.chunk_delay, args.chunks))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
