"""Auto mode's memory: which (upstream, model) pairs go prompted, and for what reason. Which upstream errors
mean "this server cannot do tools" or "it could not parse its own model's call" is read by
repair/upstream_errors.py; the round loop yields what it learned and routes/rounds.py writes it here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.state.replicated import LocalTable, Table, pair_key, pair_of


@dataclass
class Decision:
    mode: Literal["native", "prompted"]
    reason: str
    since: float
    parse_failures: int = 0

    def to_json(self) -> JSONObject:
        return {"mode": self.mode, "reason": self.reason, "since": self.since,
                "parse_failures": self.parse_failures}

    @classmethod
    def from_json(cls, row: JSONObject) -> Decision:
        mode, since, failures = row["mode"], row["since"], row.get("parse_failures", 0)
        if mode not in ("native", "prompted") or not isinstance(since, int | float) or not isinstance(failures, int):
            raise ValueError(f"not a decision: {row!r}"[:200])
        return cls("native" if mode == "native" else "prompted", str(row["reason"]), float(since), failures)


class ModeBook:
    """Per-(upstream, model) decisions of auto mode, kept in a `Table`: this process' own by default, or
    one shared through Redis by every replica (sanctum_proxy.state.replicated). Reads and writes are synchronous
    either way; the shared table sends writes on in the background."""

    def __init__(self, *, recheck_seconds: float | None = None, parse_failure_threshold: int = 3,
                 clock: Callable[[], float] = time.time, table: Table | None = None) -> None:
        self._table: Table = table if table is not None else LocalTable()
        self._recheck = recheck_seconds
        self._threshold = parse_failure_threshold
        self._clock = clock

    def _read(self, upstream: str, model: str) -> Decision | None:
        row = self._table.get(pair_key(upstream, model))
        try:
            return Decision.from_json(row) if row else None
        except (KeyError, TypeError, ValueError):  # a row some other version wrote: ignore it
            return None

    def get(self, upstream: str, model: str) -> Decision | None:
        decision = self._read(upstream, model)
        if decision and self._recheck and decision.mode == "prompted" \
                and self._clock() - decision.since > self._recheck:
            self._table.delete(pair_key(upstream, model))
            return None
        return decision

    def settle(self, upstream: str, model: str, mode: Literal["native", "prompted"], reason: str) -> None:
        old = self._read(upstream, model)
        failures = old.parse_failures if old else 0
        self._table.set(pair_key(upstream, model), Decision(mode, reason, self._clock(), failures).to_json())

    def parse_failure(self, upstream: str, model: str) -> bool:
        """Count one upstream parse failure; True when the model has now gone prompted for good."""
        decision = self._read(upstream, model) or Decision("native", "default", self._clock())
        decision.parse_failures += 1
        flipped = decision.parse_failures >= self._threshold and decision.mode != "prompted"
        if flipped:
            decision.mode, decision.reason = "prompted", "upstream_parse_failures"
            decision.since = self._clock()
        self._table.set(pair_key(upstream, model), decision.to_json())
        return flipped

    def snapshot(self) -> list[JSONObject]:
        out = []
        for key, row in self._table.items():
            upstream, model = pair_of(key)
            out.append({"upstream": upstream, "model": model, **row})
        return out

