"""The streamed answer of POST /v1/responses: the round loop's events as Responses SSE events.

Reasoning streams into a first reasoning item, text into a message item; at the end come late reasoning as a second
item, a function_call item per call, and response.completed (or .incomplete, or error and response.failed). Omens
are SSE comments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.accumulated import Accumulated
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.protocols import responses_output as api
from sanctum_proxy.protocols.reply import LiveText, Reply, Thought
from sanctum_proxy.protocols.stream_writer import StreamWriter
from sanctum_proxy.repair.loop_data import ContentDelta, FieldDelta, Final


class ResponsesWriter(StreamWriter):
    def __init__(self, response: JSONObject, ids: str, trace_id: str,
                 reply_of: Callable[[Final], Reply], *, logprobs: bool = False,
                 split_reasoning: bool = False, namespaced: dict[str, tuple[str, str]] | None = None) -> None:
        self.response, self.ids, self.trace_id = response, ids, trace_id
        super().__init__()
        self.reply_of = reply_of
        self.sequence = 0
        self.output: list[api.OutputItem] = []
        self.shown = Accumulated()
        self.live = LiveText(split_reasoning)
        self.held_tokens: list[JSONObject] = []
        self.message_open = False
        self.text_open = False
        self.thought = Thought()
        self.reasoning_at: int | None = None  # the open reasoning item's output index
        self.logprobs = logprobs  # `include` asked for them
        self.tokens: list[JSONObject] = []  # of the text shown so far
        self.namespaced = namespaced or {}  # flat name -> (namespace, name)

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    def opening(self) -> bytes:
        return (self.event("response.created", response=self.response)
                + self.event("response.in_progress", response=self.response))

    def delta(self, event: ContentDelta | FieldDelta) -> list[bytes]:
        if isinstance(event, FieldDelta):  # a refusal goes out with the answer's end
            return self.omens.due() + self.reason(event.text) if event.field in reasoning.FIELDS else []
        listed = (event.logprobs or {}).get("content") if self.logprobs else None
        fresh = [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
        tokens = self.held_tokens + fresh
        pieces = self.live.feed(event.text)
        shows = any(kind == "content" for kind, _ in pieces)
        self.held_tokens = [] if shows else tokens
        out = self.omens.due()
        for kind, text in pieces:
            if kind == "content":
                out += self.text(text, tokens)
                tokens = []
            else:
                out += self.reason(text)
        return out

    def reason(self, text: str) -> list[bytes]:
        """Reasoning live in the first (reasoning) item until the message opens, then held for the end."""
        if not text:
            return []
        if self.message_open:
            self.thought.late += text
            return []
        out = []
        if self.reasoning_at is None:
            self.reasoning_at = len(self.output)
            self.output.append(api.reasoning_item(None, self.ids))
            out += [self.event("response.output_item.added", output_index=self.reasoning_at,
                               item=self.output[self.reasoning_at]),
                    self.event("response.content_part.added", item_id=f"rs_{self.ids}",
                               output_index=self.reasoning_at, content_index=0, part=api.reasoning_part(""))]
        self.thought.live += text
        return out + [self.event("response.reasoning_text.delta", item_id=f"rs_{self.ids}",
                                 output_index=self.reasoning_at, content_index=0, delta=text)]

    def close_reasoning(self) -> list[bytes]:
        index = self.reasoning_at
        if index is None or cast(api.ReasoningItem, self.output[index])["content"]:
            return []
        text, item_id = str(self.thought.live), f"rs_{self.ids}"
        self.output[index] = api.reasoning_item(text, self.ids)
        return [self.event("response.reasoning_text.done", item_id=item_id, output_index=index, content_index=0,
                           text=text),
                self.event("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                           part=api.reasoning_part(text)),
                self.event("response.output_item.done", output_index=index, item=self.output[index])]

    def open_message(self) -> list[bytes]:
        if self.message_open:
            return []
        out = self.close_reasoning()
        self.message_open = True
        index = len(self.output)
        self.output.append(api.message_item(None, self.ids, "in_progress"))
        return out + [self.event("response.output_item.added", output_index=index, item=self.output[index])]

    def text(self, text: str, tokens: list[JSONObject] | None = None) -> list[bytes]:
        out = self.open_message()
        if not self.text_open:
            self.text_open = True
            out.append(self.event("response.content_part.added", item_id=f"msg_{self.ids}",
                                  output_index=self._message_index(), content_index=0, part=api.text_part("")))
        self.shown += text
        self.tokens += tokens or []
        out.append(self.event("response.output_text.delta", item_id=f"msg_{self.ids}",
                              output_index=self._message_index(), content_index=0, delta=text,
                              logprobs=_delta_logprobs(tokens)))
        return out

    def _message_index(self) -> int:
        return next(i for i, item in enumerate(self.output) if item["type"] == "message")

    def finish(self, final: Final) -> list[bytes]:
        reply = self.reply_of(final)
        out = self.omens.due() + self.reason(self.thought.rest(reply.reasoning)) + self.close_reasoning()
        rest = self.live.rest(final.message.get("content"), reply.text)
        bare = not (reply.calls or reply.refusal or self.message_open)
        out += self.text(rest) if rest or bare else []
        if self.message_open or reply.refusal:
            out += self.close_message(reply.refusal)
        if self.thought.late:  # an item of its own after the message
            ids = self.ids if self.reasoning_at is None else f"{self.ids}_2"
            out += self.item(api.reasoning_item(str(self.thought.late), ids))
        for call in reply.calls:
            index = len(self.output)
            item = api.call_item(call.id, call.name, "", "in_progress", self.namespaced)
            self.output.append(item)
            done = api.call_item(call.id, call.name, call.arguments, "completed", self.namespaced)
            out += [self.event("response.output_item.added", output_index=index, item=item),
                    self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                               delta=call.arguments),
                    self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=item["name"], arguments=call.arguments),
                    self.event("response.output_item.done", output_index=index, item=done)]
            self.output[index] = done
        response = api.finished(self.response, reply, self.output)
        response["sanctum"] = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return out + [self.event(kind, response=response)]

    def close_message(self, refusal: str) -> list[bytes]:
        """The message's text part done, its refusal part if the model declined, and the item done."""
        out = self.open_message()
        index, item_id = self._message_index(), f"msg_{self.ids}"
        parts: list[api.OutputText | api.Refusal] = []
        if self.text_open:
            part = api.text_part(str(self.shown), api.response_logprobs(self.tokens) if self.logprobs else [])
            out += [self.event("response.output_text.done", item_id=item_id, output_index=index, content_index=0,
                               text=str(self.shown), logprobs=_delta_logprobs(self.tokens)),
                    self.event("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                               part=part)]
            parts.append(part)
        if refusal:
            at = len(parts)
            parts.append(api.refusal_part(refusal))
            out += [self.event("response.content_part.added", item_id=item_id, output_index=index,
                               content_index=at, part=api.refusal_part("")),
                    self.event("response.refusal.delta", item_id=item_id, output_index=index, content_index=at,
                               delta=refusal),
                    self.event("response.refusal.done", item_id=item_id, output_index=index, content_index=at,
                               refusal=refusal),
                    self.event("response.content_part.done", item_id=item_id, output_index=index,
                               content_index=at, part=parts[-1])]
        done: api.MessageItem = {**api.message_item(None, self.ids, "completed"), "content": parts}
        self.output[index] = done
        return out + [self.event("response.output_item.done", output_index=index, item=done)]

    def item(self, item: api.OutputItem) -> list[bytes]:
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


def _delta_logprobs(tokens: list[JSONObject] | None) -> list[JSONObject]:
    """Chat token logprobs as the Responses API's delta events carry them."""
    return [{"token": t["token"], "logprob": t["logprob"],
             "top_logprobs": [{"token": x["token"], "logprob": x["logprob"]} for x in t.get("top_logprobs") or []]}
            for t in api.response_logprobs(tokens)]
