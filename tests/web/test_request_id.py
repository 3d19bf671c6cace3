"""web/request_id.py: a client's X-Request-Id comes back on its response (once, clipped), the app's own header of
that name replaced; without one, nothing is added. The middleware is driven as ASGI, as uvicorn drives it."""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from sanctum_proxy.web.request_id import MAX_LENGTH, EchoRequestId


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"X-Request-Id", b"the-apps-own")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def answered(headers: list[tuple[bytes, bytes]], kind: str = "http") -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    await EchoRequestId(app)({"type": kind, "headers": headers}, receive, send)
    return sent


async def test_the_clients_id_comes_back_once() -> None:
    start, body = await answered([(b"x-request-id", b"abc-123")])
    assert start["headers"] == [(b"content-type", b"text/plain"), (b"x-request-id", b"abc-123")]
    assert body == {"type": "http.response.body", "body": b"ok"}


async def test_a_long_id_is_clipped() -> None:
    start, _ = await answered([(b"x-request-id", b"x" * 5000)])
    assert dict(start["headers"])[b"x-request-id"] == b"x" * MAX_LENGTH


async def test_without_an_id_the_answer_is_untouched() -> None:
    start, _ = await answered([(b"accept", b"*/*")])
    assert start["headers"] == [(b"content-type", b"text/plain"), (b"X-Request-Id", b"the-apps-own")]
