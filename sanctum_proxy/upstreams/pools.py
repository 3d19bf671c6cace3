"""Which upstream answers which model: exact names, then globs, in entry order; "*" or none takes the rest."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from sanctum_proxy.config import UpstreamConfig, redacted_url
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ModelNotFound
from sanctum_proxy.upstreams.upstream import Upstream


def choose(entries: Sequence[UpstreamConfig], model: str) -> tuple[int, str] | None:
    """(entry index serving `model`, the name to send), or None."""
    for i, entry in enumerate(entries):
        if model in entry.aliases:
            return i, entry.aliases[model]
        if model in entry.models:
            return i, model
    for i, entry in enumerate(entries):
        if any(fnmatch.fnmatchcase(model, pattern) for pattern in entry.models if pattern != "*"):
            return i, model
    for i, entry in enumerate(entries):
        if entry.catch_all:
            return i, model
    return None


def listed_models(entries: Sequence[UpstreamConfig]) -> list[tuple[str, str]]:
    """(model id, upstream name) for every configured name and alias."""
    seen: dict[str, str] = {}
    for entry in entries:
        for model in [*entry.models, *entry.aliases]:
            if not any(ch in model for ch in "*?[") and model not in seen:
                seen[model] = entry.name
    return list(seen.items())


def model_names(entries: Sequence[UpstreamConfig]) -> set[str]:
    """The metrics' `model` label values."""
    names = {model for model, _ in listed_models(entries)}
    names.update(target for entry in entries for target in entry.aliases.values())
    return names


@dataclass(frozen=True)
class Destination:
    upstream: Upstream
    key: str  # key of auto-mode decisions and capabilities
    model: str  # the name the upstream knows

    def rewrite(self, body: JSONObject) -> JSONObject:
        """The body with an alias replaced by the upstream's name."""
        if "model" not in body or body["model"] == self.model:
            return body
        return {**body, "model": self.model}


class UpstreamPools:
    """One pool per `[[upstreams]]` entry, or the single `upstream`'s."""

    def __init__(self, upstreams: Sequence[Upstream], entries: Sequence[UpstreamConfig] = (), *,
                 health_check_seconds: float = 10.0) -> None:
        self.entries = list(entries)
        self.upstreams = list(upstreams)
        if self.entries:
            self.keys = [entry.name for entry in self.entries]
        else:  # no credentials
            self.keys = [redacted_url(self.upstreams[0].backends[0].base_url)]
        self._interval = health_check_seconds
        self._watchers: list[asyncio.Task[None]] = []

    @property
    def several(self) -> bool:
        """Configured by `[[upstreams]]`, not the single `upstream`."""
        return bool(self.entries)

    @property
    def default(self) -> Upstream:
        """The first catch-all entry, else the first."""
        index = next((i for i, e in enumerate(self.entries) if e.catch_all), 0)
        return self.upstreams[index]

    def destination(self, model: str) -> Destination:
        if not self.entries:
            return Destination(self.upstreams[0], self.keys[0], model)
        found = choose(self.entries, model)
        if found is None:
            served = ", ".join(m for m, _ in listed_models(self.entries)) or "none"
            raise ModelNotFound(f"The model {model!r} is not served here (models: {served})", param="model")
        index, upstream_model = found
        return Destination(self.upstreams[index], self.keys[index], upstream_model)

    def start(self) -> None:
        """Health checks, only for `[[upstreams]]`."""
        if self.entries:
            self._watchers = [asyncio.create_task(u.watch(self._interval)) for u in self.upstreams]

    async def aclose(self) -> None:
        for task in self._watchers:
            task.cancel()
        for task in self._watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(u.aclose() for u in self.upstreams))

    async def ready(self) -> dict[str, bool]:
        """Per upstream name: does some backend answer now."""
        answers = await asyncio.gather(*(u.ready() for u in self.upstreams))
        return {u.name: ok for u, ok in zip(self.upstreams, answers, strict=True)}

    def snapshot(self) -> list[JSONObject]:
        if not self.entries:
            return [{**self.upstreams[0].snapshot(), "models": ["*"], "aliases": {}}]
        return [{**upstream.snapshot(), "models": entry.models, "aliases": entry.aliases}
                for entry, upstream in zip(self.entries, self.upstreams, strict=True)]
