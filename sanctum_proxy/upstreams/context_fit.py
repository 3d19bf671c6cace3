"""The `num_ctx` Ollama should run a request with so nothing is cut. Pure.

Ollama silently drops a prompt's start past its context. num_ctx rises to the next power of two, within the model's
limit and `ollama_max_num_ctx`, never lowered; a request too big even then is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.upstreams import tokens

DEFAULT_ROOM = 1024  # tokens for the answer when the request names no limit
MAX_ROOM = 4096  # at most; Claude Code asks for 32000 and more
SMALLEST = 2048  # fits every context Ollama runs a model with


@dataclass(frozen=True)
class Need:
    """A request's estimated prompt tokens and the room kept for the answer."""

    prompt: int
    room: int

    @property
    def total(self) -> int:
        return self.prompt + self.room


@dataclass(frozen=True)
class Fit:
    """The num_ctx to send (None: the current context fits), or why it cannot fit."""

    need: Need
    runs_with: int
    num_ctx: int | None = None
    refused: str | None = None


def need_of(body: JSONObject, limit: object) -> Need:
    """The request's need; `limit`: the answer token limit it names, if any."""
    room = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else DEFAULT_ROOM
    return Need(tokens.estimate(body), min(room, MAX_ROOM))


def fitted(need: Need, runs_with: int, trained: int | None, cap: int, model: str) -> Fit:
    """The num_ctx that holds `need`, given what the model `runs_with`."""
    if need.total <= runs_with:
        return Fit(need, runs_with)
    most = min(trained, cap) if trained else cap
    if need.prompt > most:
        why = f"its trained context is {trained} tokens" if trained and trained <= cap else \
            f"ollama_max_num_ctx is {cap}"
        return Fit(need, runs_with, refused=(
            f"the request is about {need.prompt} tokens, more than model {model!r} can take ({why}; it would run "
            f"with {runs_with}): shorten the conversation or the tools"))
    size = min(1 << (need.total - 1).bit_length(), most)
    return Fit(need, runs_with, num_ctx=size) if size > runs_with else Fit(need, runs_with)
