"""The round loop's answer as the translated protocols read it: text, calls, reasoning, why it ended, tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from sanctum_proxy.core import reasoning
from sanctum_proxy.core.accumulated import Accumulated
from sanctum_proxy.core.calls import ToolCall, content_text
from sanctum_proxy.core.shapes import JSONObject, JSONValue
from sanctum_proxy.repair.streaming import unseen


@dataclass(frozen=True)
class Reply:
    text: str
    calls: tuple[ToolCall, ...]
    reasoning: str
    finish_reason: str  # the chat finish_reason: stop | tool_calls | length | content_filter | ...
    input_tokens: int
    output_tokens: int
    refusal: str = ""  # the model declined (OpenAI's `refusal`)
    logprobs: tuple[JSONObject, ...] = ()  # the content tokens' logprobs, as the chat answer carried them
    cached_tokens: int = 0  # usage.prompt_tokens_details.cached_tokens
    reasoning_tokens: int = 0  # usage.completion_tokens_details.reasoning_tokens
    model: str = ""  # the upstream's own model name ("" when it sent none)

    @classmethod
    def of(cls, message: Mapping[str, object], finish_reason: str, usage: Mapping[str, object] | None,
           accepted: Mapping[str, object] | None = None, *, logprobs: JSONValue = None,
           model: JSONValue = None) -> Reply:
        """`accepted`: the accepted round's raw answer, whose reasoning the repaired message drops;
        `logprobs`: the choice's chat logprobs object; `model`: the upstream's model."""
        reasoning = next((m.get(f) for m in (message, accepted or {}) for f in ("reasoning_content", "reasoning")
                          if isinstance(m.get(f), str) and m.get(f)), None)
        listed = message.get("tool_calls") or []  # a ChatMessage: the calls the loop settled (a list)
        calls = tuple(ToolCall.from_wire(c, i) for i, c in enumerate(cast(Sequence[JSONValue], listed))
                      if isinstance(c, dict))
        usage = usage or {}
        refusal = message.get("refusal")
        tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
        return cls(content_text(message.get("content")), calls, reasoning if isinstance(reasoning, str) else "",
                   finish_reason, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                   refusal if isinstance(refusal, str) else "",
                   tuple(t for t in tokens if isinstance(t, dict)) if isinstance(tokens, list) else (),
                   _count(_detail(usage, "prompt_tokens_details", "cached_tokens")),
                   _count(_detail(usage, "completion_tokens_details", "reasoning_tokens")),
                   model if isinstance(model, str) else "")


def _detail(usage: Mapping[str, object], details: str, name: str) -> JSONValue:
    part = usage.get(details)
    return part.get(name) if isinstance(part, dict) else None


def _count(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def arguments_object(arguments: str) -> dict[str, JSONValue]:
    """A call's arguments as an object (the loop only lets valid JSON objects through; {} otherwise)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def held_back(held: Accumulated, text: str) -> str:
    """What to send now of live text after `held` (whitespace held back so far, which keeps the new text's
    trailing whitespace): whitespace at the end waits for the text after it, since a call taken out of content
    takes the whitespace before it (streamed equals unstreamed). Whitespace-only deltas only append (a string
    `held + text` again and again was quadratic)."""
    body = text.rstrip()
    if not body:
        held += text
        return ""
    out = held.take() + body
    held += text[len(body):]
    return out


class LiveText:
    """The live text of a stream (chat, Responses, Messages): whitespace held back (`held_back`) and, with
    reasoning_format "split", reasoning markup taken out as reasoning pieces (`feed`). `shown` is the content
    sent; `rest` what of the final text is left to send (the chat writer: `unsent`, then `split` and `flush`)."""

    def __init__(self, split_reasoning: bool = False) -> None:
        self.splitter = reasoning.Splitter() if split_reasoning else None
        self.shown = Accumulated()  # the content sent
        self.raw = Accumulated()  # ... as the loop gave it (markup in)
        self.held = Accumulated()

    def feed(self, text: str) -> list[tuple[str, str]]:
        """The (field, text) pieces to send now of a live delta, in order: field "content", or
        "reasoning_content" (the text of reasoning markup, when splitting)."""
        return self.split(self.take(text))

    def take(self, text: str) -> str:
        """What to send now of a live delta, markup in: trailing whitespace waits for the text after it."""
        text = held_back(self.held, text)
        self.raw += text
        return text

    def split(self, text: str) -> list[tuple[str, str]]:
        """Text to send as (field, text) pieces: reasoning markup out when splitting (a partial marker waits)."""
        if self.splitter is None:
            pieces = [("content", text)] if text else []
        else:
            pieces = self.splitter.feed(text)
        self.shown += "".join(t for field, t in pieces if field == "content")
        return pieces

    def flush(self) -> list[tuple[str, str]]:
        """The end of the text: the splitter's partial marker, text after all."""
        pieces = self.splitter.flush() if self.splitter is not None else []
        self.shown += "".join(t for field, t in pieces if field == "content")
        return pieces

    def unsent(self, final_content: str) -> str:
        """What of the answer's content (markup in) is left to send; counted as sent."""
        rest = rest_after(str(self.raw), str(self.held), final_content)
        self.raw += rest
        return rest

    def rest(self, final_content: Any, text: str) -> str:
        """What of the answer's `text` is left to send; `final_content`: the answer's content as the loop gave it
        (read when splitting: `text` is then the split content, or a refusal). The split reasoning left is not
        given here: it is in the answer's reasoning (`Thought.rest`)."""
        if self.splitter is None:
            return rest_after(str(self.shown), str(self.held), text)
        raw = content_text(final_content)
        pieces = self.splitter.feed(rest_after(str(self.raw), str(self.held), raw)) + self.splitter.flush()
        rest = "".join(t for f, t in pieces if f == "content")
        return rest if raw.strip() or not text else rest_after(str(self.shown), "", text)


class Thought:
    """The reasoning of a translated stream, as it arrives (the reasoning fields' deltas and, when splitting,
    the reasoning markup's text). While no answer item / block has gone out it is live in its own item / block,
    which comes first as in the unstreamed answer; reasoning that arrives after the answer's text began is held
    (`late`) for an item / block after the text. `sent` is all of it so far, live or held."""

    def __init__(self) -> None:
        self.live = Accumulated()  # sent in the first reasoning item / block
        self.late = Accumulated()  # held for the item / block after the text

    @property
    def sent(self) -> str:
        return str(self.live) + str(self.late)

    def rest(self, reply_reasoning: str) -> str:
        """What of the answer's reasoning the stream has not carried: the rest when it continues what came
        live, else nothing (a hidden round answered after a live one reasoned: the client keeps what it saw)."""
        sent = self.sent
        return reply_reasoning[len(sent):] if reply_reasoning.startswith(sent) else ""


def rest_after(shown: str, held: str, final: str) -> str:
    """What of the final text to send after `shown` was sent and `held` (whitespace) held back: exactly the
    rest when the final text continues what was shown (the same round), else `streaming.unseen` (a hidden
    round's answer), set off by the held whitespace."""
    if final.startswith(shown):
        return final[len(shown):]
    rest = unseen(shown + held, final)
    return held + rest if rest else ""
