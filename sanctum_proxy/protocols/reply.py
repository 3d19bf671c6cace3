"""The round loop's answer as the translated protocols read it."""

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
    finish_reason: str
    input_tokens: int
    output_tokens: int
    refusal: str = ""
    logprobs: tuple[JSONObject, ...] = ()
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    model: str = ""

    @classmethod
    def of(cls, message: Mapping[str, object], finish_reason: str, usage: Mapping[str, object] | None,
           accepted: Mapping[str, object] | None = None, *, logprobs: JSONValue = None,
           model: JSONValue = None) -> Reply:
        """`accepted`: the raw answer whose reasoning the repaired message drops."""
        reasoning = next((m.get(f) for m in (message, accepted or {}) for f in ("reasoning_content", "reasoning")
                          if isinstance(m.get(f), str) and m.get(f)), None)
        listed = message.get("tool_calls") or []
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
    """A call's arguments as an object; {} unless valid JSON."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def held_back(held: Accumulated, text: str) -> str:
    """Live text to send now; trailing whitespace waits, as a call taken out takes it."""
    body = text.rstrip()
    if not body:
        held += text
        return ""
    out = held.take() + body
    held += text[len(body):]
    return out


class LiveText:
    """A stream's live text, with reasoning optionally split out."""

    def __init__(self, split_reasoning: bool = False) -> None:
        self.splitter = reasoning.Splitter(reasoning.MARKERS if split_reasoning else reasoning.UNRENDERED)
        self.shown = Accumulated()
        self.raw = Accumulated()
        self.held = Accumulated()

    def feed(self, text: str) -> list[tuple[str, str]]:
        """The (field, text) pieces to send now of a live delta."""
        return self.split(self.take(text))

    def take(self, text: str) -> str:
        """What to send now of a live delta, markup in."""
        text = held_back(self.held, text)
        self.raw += text
        return text

    def split(self, text: str) -> list[tuple[str, str]]:
        """Text as (field, text) pieces."""
        if self.splitter is None:
            pieces = [("content", text)] if text else []
        else:
            pieces = self.splitter.feed(text)
        self.shown += "".join(t for field, t in pieces if field == "content")
        return pieces

    def flush(self) -> list[tuple[str, str]]:
        """The splitter's held partial marker, as text."""
        pieces = self.splitter.flush() if self.splitter is not None else []
        self.shown += "".join(t for field, t in pieces if field == "content")
        return pieces

    def unsent(self, final_content: str) -> str:
        """The answer's content left to send, counted as sent."""
        rest = rest_after(str(self.raw), str(self.held), final_content)
        self.raw += rest
        return rest

    def rest(self, final_content: Any, text: str) -> str:
        """The answer's `text` left to send."""
        if self.splitter is None:
            return rest_after(str(self.shown), str(self.held), text)
        raw = content_text(final_content)
        pieces = self.splitter.feed(rest_after(str(self.raw), str(self.held), raw)) + self.splitter.flush()
        rest = "".join(t for f, t in pieces if f == "content")
        return rest if raw.strip() or not text else rest_after(str(self.shown), "", text)


class Thought:
    """A translated stream's reasoning: live, or `late` once the text began."""

    def __init__(self) -> None:
        self.live = Accumulated()
        self.late = Accumulated()

    @property
    def sent(self) -> str:
        return str(self.live) + str(self.late)

    def rest(self, reply_reasoning: str) -> str:
        """The answer's reasoning not yet streamed ("" after a hidden round)."""
        sent = self.sent
        return reply_reasoning[len(sent):] if reply_reasoning.startswith(sent) else ""


def rest_after(shown: str, held: str, final: str) -> str:
    """The final text left after `shown` and `held` whitespace."""
    if final.startswith(shown):
        return final[len(shown):]
    rest = unseen(shown + held, final)
    return held + rest if rest else ""
