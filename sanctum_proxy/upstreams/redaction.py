"""The upstream key masked in everything an upstream sends back (client.py applies it; pure).

A server may write the key as it is, JSON-escaped (`\\/`, `\\u0073`, any character, any case of hex),
percent-encoded (in a `Location` header), or cut between two reads of a body or two events of a stream.
`KeyMask` finds it in every form: `masked` (bytes) / `text` replace whole copies with `***`, `ByteStream` holds back
only a tail that could still become a copy (linear: the tail is shorter than the longest form of the key),
and `DeltaMask` does the same for the text a chat stream spreads over its events (content, reasoning, call
arguments), so a key split between two SSE events is masked before any part of it goes out.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
_STREAMED = ("content", "reasoning_content", "reasoning", "refusal")  # delta fields that arrive in pieces


def _forms(char: str) -> list[bytes]:
    """Every way `char` may be written: as it is (UTF-8), a JSON escape, percent-encoded (ASCII)."""
    literal = char.encode()
    forms = [literal]
    if ord(char) < 0x10000:
        forms.append(b"\\u%04x" % ord(char))
    if char in "/\"\\":
        forms.append(b"\\" + literal)
    if ord(char) < 0x80:
        forms.append(b"%%%02x" % ord(char))
    return forms


class KeyMask:
    """The key's forms, compiled once per upstream."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._chars = [_forms(c) for c in key]
        alternatives = [b"(?:" + b"|".join(re.escape(f) for f in forms) + b")" for forms in self._chars]
        self._bytes = re.compile(b"".join(alternatives), re.IGNORECASE)
        self._text = re.compile(b"".join(alternatives).decode(), re.IGNORECASE)
        self.longest = sum(max(len(f) for f in forms) for forms in self._chars)

    def masked(self, data: bytes) -> bytes:
        return self._bytes.sub(MASK.encode(), data) if data else data

    def text(self, value: str) -> str:
        return self._text.sub(MASK, value) if value else value

    def held(self, data: bytes) -> int:
        """How many last bytes of `data` could be the start of a copy of the key still arriving."""
        for start in range(max(0, len(data) - self.longest + 1), len(data)):
            if self._could_start(data, start):
                return len(data) - start
        return 0

    def _could_start(self, data: bytes, at: int) -> bool:
        """Whether data[at:] (which ends before a whole copy would) is the beginning of one."""
        for forms in self._chars:
            if at == len(data):
                return True
            rest = data[at:at + 8].lower()
            step = next((len(f) for f in forms if rest.startswith(f.lower())), 0)
            if not step:
                return any(f.lower().startswith(rest) for f in forms) and at + len(rest) == len(data)
            at += step
        return False  # a whole copy: `masked` has already masked it


class ByteStream:
    """A body read in pieces: the pieces with the key masked, a possible start of it held until it is settled."""

    def __init__(self, mask: KeyMask) -> None:
        self.mask = mask
        self._held = b""

    def feed(self, piece: bytes) -> bytes:
        data = self.mask.masked(self._held + piece)
        keep = self.mask.held(data)
        self._held = data[len(data) - keep:] if keep else b""
        return data[:len(data) - keep]

    def end(self) -> bytes:
        held, self._held = self._held, b""
        return held


class DeltaMask:
    """A chat stream's chunks (parsed, each already masked whole): the text fields that arrive in pieces hold
    back a tail that could be the start of the key until the next piece of the same field (or the choice's
    finish_reason) settles it."""

    def __init__(self, mask: KeyMask) -> None:
        self.key = mask.key
        self._held: dict[tuple[int, str, int], str] = {}  # (choice, field, call index) -> text held

    def chunk(self, chunk: dict[str, Any]) -> dict[str, Any]:
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            given = choice.get("index")
            index = given if isinstance(given, int) else 0
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for name in _STREAMED:
                    if isinstance(delta.get(name), str):
                        delta[name] = self._piece((index, name, -1), delta[name])
                for position, call in enumerate(delta.get("tool_calls") or ()):
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                        at = call.get("index")
                        slot = at if isinstance(at, int) else position
                        function["arguments"] = self._piece((index, "arguments", slot), function["arguments"])
            if choice.get("finish_reason"):
                self._release(index, choice)
        return chunk

    def _piece(self, slot: tuple[int, str, int], text: str) -> str:
        text = (self._held.pop(slot, "") + text).replace(self.key, MASK)
        keep = _prefix_at_end(text, self.key)
        if keep:
            self._held[slot] = text[len(text) - keep:]
            return text[:len(text) - keep]
        return text

    def _release(self, index: int, choice: dict[str, Any]) -> None:
        """The choice is finished: what it held goes out with its last chunk."""
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = choice["delta"] = {}
        for slot in [s for s in self._held if s[0] == index]:
            text = self._held.pop(slot)
            _, name, call = slot
            if name != "arguments":
                before = delta.get(name)
                delta[name] = (before if isinstance(before, str) else "") + text
                continue
            calls = delta.setdefault("tool_calls", [])
            if isinstance(calls, list):
                calls.append({"index": call, "function": {"arguments": text}})


def _prefix_at_end(text: str, key: str) -> int:
    """How many last characters of `text` are the first characters of `key` (0 when none)."""
    start = max(0, len(text) - len(key) + 1)
    while (start := text.find(key[:1], start)) >= 0:
        if key.startswith(text[start:]):
            return len(text) - start
        start += 1
    return 0
