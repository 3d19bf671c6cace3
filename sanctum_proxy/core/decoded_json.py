"""What a lenient JSON read gives back, and the nesting limit its readers share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 200
CLOSER = {"{": "}", "[": "]", "(": ")"}


@dataclass(frozen=True)
class Decoded:
    value: Any
    repairs: tuple[str, ...]


@dataclass(frozen=True)
class Undecodable:
    why: str
