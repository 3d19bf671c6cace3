"""The streamed answer of POST /v1/responses: the round loop's events as Responses SSE events
(`event: <type>` and `data: {"type", "sequence_number", ...}`). Pure but for the running record of what the
client has seen, like routes/sse.py's SseWriter, whose place it takes in the same pump.

    opening     response.created, response.in_progress
    live text   response.output_item.added (message), response.content_part.added, response.output_text.delta
    the Final   the rest of the text; output_text.done, content_part.done, output_item.done for the message;
                a reasoning item where the model gave reasoning; per call output_item.added (function_call),
                function_call_arguments.delta and .done, output_item.done; response.completed (or
                response.incomplete when max_output_tokens cut the answer)
    an error    `error` (the proxy's error type, code and message) and response.failed
Omens go out as SSE comment lines (`: omen {json}`), which SSE clients skip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .. import omens as om
from ..errors import ProxyError
from ..repair.loop import ContentDelta, Final, Plan
from ..streaming import unseen
from . import responses_api as api
from .reply import Reply

KEEPALIVE = b": keep-alive\n\n"


class ResponsesWriter:
    keepalive = KEEPALIVE

    def __init__(self, response: dict[str, Any], ids: str, trace_id: str, plan: Plan,
                 reply_of: Callable[[Final], Reply]) -> None:
        self.response, self.ids, self.trace_id = response, ids, trace_id
        self.plan, self.omens_sent = plan, 0
        self.omens: list[om.Omen] = []  # the loop's omens so far (render adds each one)
        self.reply_of = reply_of
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.shown = ""
        self.message_open = False
        self.ended = False

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def opening(self) -> bytes:
        return (self.event("response.created", response=self.response)
                + self.event("response.in_progress", response=self.response))

    def new_omens(self) -> list[bytes]:
        omens = self.omens
        out = [om.sse_comment(o) for o in omens[self.omens_sent:]]
        self.omens_sent = max(self.omens_sent, len(omens))
        return out

    def render(self, event: Any) -> list[bytes]:
        if event is None:
            event = ProxyError("internal error: the round loop ended without an answer")
        if isinstance(event, om.Omen):  # held: sent with the next event that goes out
            self.omens.append(event)
            return []
        if isinstance(event, ContentDelta):
            return self.new_omens() + (self.text(event.text) if event.text else [])
        if isinstance(event, ProxyError):
            self.ended = True
            return self.new_omens() + self.fail(event)
        if isinstance(event, Final):
            self.ended = True
            return self.new_omens() + self.finish(event)
        return []

    def text(self, text: str) -> list[bytes]:
        out = []
        if not self.message_open:
            self.message_open = True
            index = len(self.output)
            self.output.append(api.message_item(None, self.ids, "in_progress"))
            out += [self.event("response.output_item.added", output_index=index, item=self.output[index]),
                    self.event("response.content_part.added", item_id=f"msg_{self.ids}", output_index=index,
                               content_index=0, part=api.text_part(""))]
        self.shown += text
        out.append(self.event("response.output_text.delta", item_id=f"msg_{self.ids}",
                              output_index=self._message_index(), content_index=0, delta=text, logprobs=[]))
        return out

    def _message_index(self) -> int:
        return next(i for i, item in enumerate(self.output) if item["type"] == "message")

    def finish(self, final: Final) -> list[bytes]:
        reply = self.reply_of(final)
        rest = unseen(self.shown, reply.text)
        out = self.text(rest) if rest or (not reply.calls and not self.message_open) else []
        if self.message_open:
            out += self.close_message()
        if reply.reasoning:
            item = api.reasoning_item(reply.reasoning, self.ids)
            out += self.item(item)
        for call in reply.calls:
            index = len(self.output)
            item = api.call_item(call.id, call.name, "", "in_progress")
            self.output.append(item)
            done = api.call_item(call.id, call.name, call.arguments, "completed")
            out += [self.event("response.output_item.added", output_index=index, item=item),
                    self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                               delta=call.arguments),
                    self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=call.name, arguments=call.arguments),
                    self.event("response.output_item.done", output_index=index, item=done)]
            self.output[index] = done
        response = api.finished(self.response, reply, self.output)
        response["sanctum"] = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return out + [self.event(kind, response=response)]

    def close_message(self) -> list[bytes]:
        index = self._message_index()
        done = api.message_item(self.shown, self.ids, "completed")
        self.output[index] = done
        item_id = done["id"]
        return [self.event("response.output_text.done", item_id=item_id, output_index=index, content_index=0,
                           text=self.shown, logprobs=[]),
                self.event("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                           part=api.text_part(self.shown)),
                self.event("response.output_item.done", output_index=index, item=done)]

    def item(self, item: dict[str, Any]) -> list[bytes]:
        index = len(self.output)
        self.output.append(item)
        return [self.event("response.output_item.added", output_index=index, item=item),
                self.event("response.output_item.done", output_index=index, item=item)]

    def fail(self, error: ProxyError) -> list[bytes]:
        body = error.body()["error"]
        out = [self.event("error", code=body.get("code") or body.get("type"), message=error.message,
                          param=error.param)]
        response = api.failed(self.response, error.message, body.get("type"), error.param)
        response["output"] = self.output
        return out + [self.event("response.failed", response=response)]
