"""Auto mode's memory: which (upstream, model) pairs go prompted, and why.

Parse failures decay; a flip follows the proxy's own request (lesson_checks.py), expires, and is revoked by a native
success.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.state.replicated import LocalTable, Table, clear_pairs, pair_key, pair_of

PARSE_FAILURES = "upstream_parse_failures"
FLIP_SECONDS = 86400.0  # an upstream may have gained tools since


@dataclass
class Decision:
    mode: Literal["native", "prompted"]
    reason: str
    since: float
    parse_failures: int = 0
    failed_at: list[float] = field(default_factory=list)  # when the recent parse failures were, oldest first

    def to_json(self) -> JSONObject:
        return {"mode": self.mode, "reason": self.reason, "since": self.since,
                "parse_failures": self.parse_failures, "failed_at": list(self.failed_at)}

    @classmethod
    def from_json(cls, row: JSONObject) -> Decision:
        mode, since, failures = row["mode"], row["since"], row.get("parse_failures", 0)
        failed_at = row.get("failed_at", [])
        if mode not in ("native", "prompted") or not isinstance(since, int | float) or not isinstance(failures, int) \
                or not isinstance(failed_at, list) or not all(isinstance(t, int | float) for t in failed_at):
            raise ValueError(f"not a decision: {row!r}"[:200])
        return cls("native" if mode == "native" else "prompted", str(row["reason"]), float(since), failures,
                   [float(t) for t in failed_at[-64:]])


class ModeBook:
    """Per-(upstream, model) decisions in a `Table`, this process' own or shared by replicas through Redis."""

    def __init__(self, *, recheck_seconds: float | None = None, parse_failure_threshold: int = 3,
                 clock: Callable[[], float] = time.time, table: Table | None = None,
                 failure_window: float = 600.0, failure_flip: float = 3600.0) -> None:
        self._table: Table = table if table is not None else LocalTable()
        self._recheck = recheck_seconds
        self._threshold = parse_failure_threshold
        self._clock = clock
        self._window, self._flip = failure_window, failure_flip
        self.checking: dict[tuple[str, str], asyncio.Task[None]] = {}  # pairs being checked (lesson_checks.py)

    def _read(self, upstream: str, model: str) -> Decision | None:
        row = self._table.get(pair_key(upstream, model))
        try:
            return Decision.from_json(row) if row else None
        except (KeyError, TypeError, ValueError):  # a row some other version wrote: ignore it
            return None

    def get(self, upstream: str, model: str) -> Decision | None:
        decision = self._read(upstream, model)
        if decision and decision.mode == "prompted" and self._expired(decision):
            self._table.delete(pair_key(upstream, model))
            return None
        return decision

    def _expired(self, decision: Decision) -> bool:
        age = self._clock() - decision.since
        if decision.reason == PARSE_FAILURES and age > self._flip or age > FLIP_SECONDS:
            return True
        return bool(self._recheck) and age > (self._recheck or 0)

    def settle(self, upstream: str, model: str, mode: Literal["native", "prompted"], reason: str) -> None:
        old = self._read(upstream, model)
        failures = old.parse_failures if old else 0
        self._table.set(pair_key(upstream, model), Decision(mode, reason, self._clock(), failures).to_json())

    def parse_failure(self, upstream: str, model: str) -> bool:
        """Count one; True at the threshold."""
        now = self._clock()
        decision = self._read(upstream, model) or Decision("native", "default", now)
        recent = [t for t in decision.failed_at if now - t < self._window]
        decision.failed_at = [*recent, now][-self._threshold:]
        decision.parse_failures = len(decision.failed_at)
        self._table.set(pair_key(upstream, model), decision.to_json())
        return decision.parse_failures >= self._threshold and decision.mode != "prompted"

    def forgive(self, upstream: str, model: str) -> None:
        """The check found no failure: the count starts again."""
        decision = self._read(upstream, model)
        if decision is not None and decision.mode == "native":
            self._table.delete(pair_key(upstream, model))

    def revoke(self, upstream: str, model: str) -> bool:
        """End a flip (True where there was one)."""
        decision = self._read(upstream, model)
        if decision is None or decision.mode != "prompted":
            return False
        self._table.delete(pair_key(upstream, model))
        return True

    def clear(self, upstream: str | None = None, model: str | None = None) -> int:
        """Forget decisions (None: any); how many."""
        return clear_pairs(self._table, upstream, model)

    def snapshot(self) -> list[JSONObject]:
        out = []
        for key, row in self._table.items():
            upstream, model = pair_of(key)
            out.append({"upstream": upstream, "model": model, **row})
        return out

