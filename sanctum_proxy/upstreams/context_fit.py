"""A context that fits: the `num_ctx` Ollama should run a request with so that nothing of it is cut. Pure.

Ollama runs a model with the request's `options.num_ctx`, else its Modelfile's, else the server's default, and
silently drops the start of a prompt longer than that (the tools and the system prompt first). The prompt is
estimated as upstreams/tokens.py does (a token per four characters of its JSON, an overcount), plus room for the
answer. Where that is more than the model would run with, num_ctx is raised to the next power of two (so that
requests of similar size share one loaded runner) up to the model's trained length and the setting
`ollama_max_num_ctx`; it is never lowered. Where even the prompt alone does not fit there, the request is refused
with the sizes named.
"""

from __future__ import annotations

from dataclasses import dataclass

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.upstreams import tokens

DEFAULT_ROOM = 1024  # tokens left for the answer when the request names no limit
MAX_ROOM = 4096  # ... at most, whatever it names (Claude Code asks for 32000 and more)
SMALLEST = 2048  # a request that needs no more than this fits every context Ollama runs a model with


@dataclass(frozen=True)
class Need:
    """What a request needs: its prompt's estimated tokens and the room kept for the answer."""

    prompt: int
    room: int

    @property
    def total(self) -> int:
        return self.prompt + self.room


@dataclass(frozen=True)
class Fit:
    """The num_ctx to send (None: the context the model runs with fits), or why it cannot fit (`refused`)."""

    need: Need
    runs_with: int
    num_ctx: int | None = None
    refused: str | None = None


def need_of(body: JSONObject, limit: object) -> Need:
    """The request's need; `limit`: the answer's token limit it names (num_predict, max_tokens), if any."""
    room = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else DEFAULT_ROOM
    return Need(tokens.estimate(body), min(room, MAX_ROOM))


def fitted(need: Need, runs_with: int, trained: int | None, cap: int, model: str) -> Fit:
    """The num_ctx that holds `need`, from what the model `runs_with` (see the module docstring)."""
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
