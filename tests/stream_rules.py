"""Reading a proxy SSE body the strict way: the OpenAI stream rules of contract section 6, asserted, and the
stream accumulated into what a client ends up with (content, calls, finish_reason, usage, sanctum, omens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Streamed:
    content: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "type", "name", "arguments"}
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    sanctum: dict[str, Any] | None = None
    omens: list[dict[str, Any]] = field(default_factory=list)  # from comments and from omen events
    error: dict[str, Any] | None = None
    comments: list[str] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    function_call: dict[str, str] | None = None  # legacy `functions` streams
    reasoning: dict[str, str] = field(default_factory=dict)  # reasoning_content / reasoning deltas, by field

    def parsed_calls(self) -> list[dict[str, Any]]:
        """Names and parsed arguments, the way the corpus states them."""
        return [{"name": c["name"], "arguments": orjson.loads(c["arguments"])} for c in self.calls]


def events(raw: bytes) -> list[tuple[str | None, bytes | None, str | None]]:
    """(event name, data, comment) per SSE block; no `id:` or `retry:` field, nothing after [DONE]."""
    text = raw.decode()
    assert "\r" not in text, "frames are separated by \\n only"
    assert text.endswith("\n\n"), f"the body ends mid-event: {text[-80:]!r}"
    out: list[tuple[str | None, bytes | None, str | None]] = []
    for block in text[:-2].split("\n\n"):
        name = data = comment = None
        for line in block.split("\n"):
            field_name = line.split(":", 1)[0]
            assert field_name not in ("id", "retry"), f"SSE {field_name!r} field sent: {line!r}"
            if line.startswith(":"):
                comment = line[1:].strip()
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                assert data is None, "one data line per event"
                data = line[6:].encode()
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        out.append((name, data, comment))
    return out


def read_stream(raw: bytes) -> Streamed:
    """Assert the OpenAI stream rules on a whole SSE body and accumulate it."""
    got = Streamed()
    blocks = events(raw)
    done_at = next((i for i, (_, d, _c) in enumerate(blocks) if d == b"[DONE]"), None)
    if done_at is not None:
        assert done_at == len(blocks) - 1, "nothing may follow [DONE]"
    started: dict[int, dict[str, Any]] = {}
    for name, data, comment in blocks:
        if comment is not None:
            got.comments.append(comment)
            if comment.startswith("omen "):
                got.omens.append(orjson.loads(comment[5:]))
            continue
        if data == b"[DONE]":
            break
        assert data is not None
        payload = orjson.loads(data)
        if name == "omen":
            assert payload.get("object") == "sanctum.omen" and payload.get("choices") == [], payload
            got.omens.append(payload)
            continue
        assert name is None, f"unexpected named event {name!r}"
        if "error" in payload:
            assert got.error is None and set(payload["error"]) >= {"message", "type", "param", "code"}
            got.error = payload["error"]
            continue
        assert got.error is None, "nothing but the end follows an error event"
        _take_chunk(got, payload, started)
    if got.error is not None:
        assert done_at is None, "an error ends the stream without [DONE]"
        return got
    assert done_at is not None, "the stream ends with [DONE]"
    assert got.finish_reason is not None, "a finish_reason always"
    assert sorted(started) == list(range(len(started))), f"call indices with gaps: {sorted(started)}"
    got.calls = [started[i] for i in sorted(started)]
    last = got.chunks[-1]
    assert "sanctum" in last, "the last chunk before [DONE] carries the sanctum object"
    got.sanctum = last["sanctum"]
    return got


def read_choices(raw: bytes) -> tuple[dict[int, Streamed], list[dict[str, Any]]]:
    """A stream of n > 1 choices: each choice's own stream (its chunks, read by the same rules as one choice's),
    and every chunk as sent. The usage chunk and the sanctum of the last chunk go with choice 0."""
    got: dict[int, Streamed] = {}
    started: dict[int, dict[int, dict[str, Any]]] = {}
    chunks: list[dict[str, Any]] = []
    blocks = events(raw)
    assert blocks[-1][1] == b"[DONE]", "the stream ends with [DONE]"
    for _name, data, comment in blocks[:-1]:
        if comment is not None:
            continue
        assert data is not None
        payload = orjson.loads(data)
        assert "error" not in payload, payload
        chunks.append(payload)
        if not payload["choices"]:
            _take_chunk(got.setdefault(0, Streamed()), payload, started.setdefault(0, {}))
        for choice in payload["choices"]:
            index = choice["index"]
            one = {**payload, "choices": [{**choice, "index": 0}]}
            _take_chunk(got.setdefault(index, Streamed()), one, started.setdefault(index, {}))
    for index, streamed in got.items():
        streamed.calls = [started[index][i] for i in sorted(started[index])]
    assert "sanctum" in chunks[-1], "the last chunk before [DONE] carries the sanctum object"
    got[0].sanctum = chunks[-1]["sanctum"]
    return got, chunks


def _take_chunk(got: Streamed, chunk: dict[str, Any], started: dict[int, dict[str, Any]]) -> None:
    assert chunk["object"] == "chat.completion.chunk" and chunk["id"]
    assert "created" in chunk and "model" in chunk
    first = not got.chunks
    got.chunks.append(chunk)
    if chunk.get("usage") is not None:
        assert chunk["choices"] == [] and got.usage is None, "one usage chunk, with no choices"
        got.usage = chunk["usage"]
    for choice in chunk["choices"]:
        assert choice["index"] == 0
        delta = choice["delta"]
        assert ("role" in delta) == first, "role in the first chunk, and only there"
        assert got.finish_reason is None, "nothing follows the finish_reason but the usage chunk"
        got.content += delta.get("content") or ""
        for name in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(name), str):
                got.reasoning[name] = got.reasoning.get(name, "") + delta[name]
        for call in delta.get("tool_calls") or []:
            _take_call(call, started)
        if "function_call" in delta:
            fc = delta["function_call"]
            if got.function_call is None:
                got.function_call = {"name": fc["name"], "arguments": ""}
            else:
                assert "name" not in fc, "the function name is sent once"
            got.function_call["arguments"] += fc.get("arguments") or ""
        got.finish_reason = choice["finish_reason"]


def _take_call(call: dict[str, Any], started: dict[int, dict[str, Any]]) -> None:
    index = call["index"]
    function = call.get("function") or {}
    if index not in started:
        assert index == len(started), f"call index {index} skips ahead of {len(started)}"
        assert call.get("id") and call.get("type") == "function" and function.get("name"), call
        started[index] = {"id": call["id"], "type": "function", "name": function["name"], "arguments": ""}
    else:
        assert not ({"id", "type"} & set(call)) and "name" not in function, f"id/type/name sent twice: {call}"
        assert index == len(started) - 1, "a call's fragments follow its head, calls one after another"
    started[index]["arguments"] += function.get("arguments") or ""


def named_events(raw: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A Responses or Messages API stream: its events (each `event:` line names its data's `type`, asserted) and
    the omens of its `: omen {json}` comments."""
    events: list[dict[str, Any]] = []
    omens: list[dict[str, Any]] = []
    for block in raw.decode().split("\n\n"):
        if block.startswith(": omen "):
            omens.append(orjson.loads(block[len(": omen "):]))
        elif block.startswith("event: "):
            name, data = block.split("\n", 1)
            event = orjson.loads(data.removeprefix("data: "))
            assert event["type"] == name.removeprefix("event: ")
            events.append(event)
    return events, omens
