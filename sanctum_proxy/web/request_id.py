"""X-Request-Id: a client's request id comes back on its response, streams untouched."""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
MAX_LENGTH = 200


class EchoRequestId:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = next((v for k, v in scope.get("headers", ()) if k == HEADER), None) \
            if scope["type"] == "http" else None
        if not given:
            await self.app(scope, receive, send)
            return

        def send_with_id(message: Message) -> Awaitable[None]:
            # not async: no coroutine per body write
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, given[:MAX_LENGTH])]}
            return send(message)

        await self.app(scope, receive, send_with_id)
