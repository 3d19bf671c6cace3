r"""The upstream key masked in everything an upstream sends back. Pure.

The key may come raw, escaped, percent-encoded or split across reads; a possible partial copy is held back.
"""

from __future__ import annotations

import re

from sanctum_proxy.core.shapes import JSONObject

MASK = "***"
_STREAMED = ("content", "reasoning_content", "reasoning", "refusal")


def _forms(char: str) -> list[bytes]:
    """Every way `char` may be written: raw, JSON-escaped or percent-encoded, hex in either case."""
    literal = char.encode()
    forms = [literal]
    if ord(char) < 0x10000:
        forms += _cases(b"\\u", b"%04x" % ord(char))
    if char in "/\"\\":
        forms.append(b"\\" + literal)
    if ord(char) < 0x80:
        forms += _cases(b"%", b"%02x" % ord(char))
    return forms


def _cases(prefix: bytes, digits: bytes) -> list[bytes]:
    out = [prefix]
    for digit in digits:
        out = [o + bytes([c]) for o in out for c in {digit, bytes([digit]).upper()[0]}]
    return out


class KeyMask:
    """The key's forms, compiled once; the slow pattern runs only near an escape of a key character."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._literal = key.encode()
        self._chars = [_forms(c) for c in key]
        alternatives = [b"(?:" + b"|".join(re.escape(f) for f in forms) + b")" for forms in self._chars]
        self._bytes = re.compile(b"".join(alternatives))
        self._text = re.compile(b"".join(alternatives).decode())
        self._decoded = {f: forms[0] for forms in self._chars for f in forms[1:]}
        # escapes of the key's characters by literal prefix, which re finds at C speed
        by_prefix: dict[bytes, set[bytes]] = {}
        for escape in self._decoded:
            prefix = escape[:4] if escape.startswith(b"\\u") else escape[:1]
            by_prefix.setdefault(prefix, set()).add(escape[len(prefix):])
        self._short = [e for e in self._decoded if len(e) == 2]
        self._narrow = [re.compile(re.escape(prefix) + b"(?:" + b"|".join(re.escape(r) for r in sorted(rests)) + b")")
                        for prefix, rests in by_prefix.items() if prefix != b"\\"]
        self._split = re.compile(b"(" + b"|".join(p.pattern for p in self._narrow) + b")" if self._narrow else b"(?!)")
        self._first = {f[:1] for f in self._chars[0]} if self._chars else set()
        self.longest = sum(max(len(f) for f in forms) for forms in self._chars)

    def masked(self, data: bytes) -> bytes:
        if self._literal in data:
            data = data.replace(self._literal, MASK.encode())
        anchors = self._escapes_at(data)
        if not anchors:
            return data
        windows: list[list[int]] = []
        for found, size in anchors:
            start, end = max(0, found - self.longest), found + size + self.longest
            if windows and start <= windows[-1][1]:
                windows[-1][1] = end
            else:
                windows.append([start, end])
        out, at = [], 0
        for start, end in windows:
            out += [data[at:start], self._bytes.sub(MASK.encode(), data[start:end])]
            at = end
        out.append(data[at:])
        return b"".join(out)

    def _escapes_at(self, data: bytes) -> list[tuple[int, int]]:
        """(offset, size) of each escape that may be part of a copy; none in the common case."""
        plain = data
        for escape in self._short:  # some encoders escape every slash
            plain = plain.replace(escape, self._decoded[escape])
        if any(pattern.search(plain) for pattern in self._narrow):
            plain = b"".join(self._decoded.get(piece, piece) for piece in self._split.split(plain))
        if self._literal not in plain:
            return []
        patterns = [*self._narrow, *(re.compile(re.escape(e)) for e in self._short)]
        return sorted((m.start(), m.end() - m.start()) for p in patterns for m in p.finditer(data))

    def text(self, value: str) -> str:
        return self._text.sub(MASK, value) if value else value

    def held(self, data: bytes) -> int:
        """How many last bytes of `data` could start a copy of the key."""
        tail = max(0, len(data) - self.longest + 1)
        starts = sorted(at for first in self._first for at in _positions(data, first, tail))
        for start in starts:
            if self._could_start(data, start):
                return len(data) - start
        return 0

    def _could_start(self, data: bytes, at: int) -> bool:
        """Whether data[at:] begins a copy."""
        for forms in self._chars:
            if at == len(data):
                return True
            rest = data[at:at + 8]
            step = next((len(f) for f in forms if rest.startswith(f)), 0)
            if not step:
                return any(f.startswith(rest) for f in forms) and at + len(rest) == len(data)
            at += step
        return False  # a whole copy: `masked` has already masked it


def masked(mask: KeyMask | None, data: bytes) -> bytes:
    """`data` with the key masked; as it is where the upstream has no key."""
    return mask.masked(data) if mask is not None else data


def _positions(data: bytes, byte: bytes, start: int) -> list[int]:
    out = []
    while (start := data.find(byte, start)) >= 0:
        out.append(start)
        start += 1
    return out


class ByteStream:
    """A body read in pieces, masked, holding back a possible start of the key."""

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
    """A chat stream's chunks, holding back per text field a tail that could start the key until it is settled."""

    def __init__(self, mask: KeyMask) -> None:
        self.key = mask.key
        self._held: dict[tuple[int, str, int], str] = {}  # (choice, field, call index) -> text held

    def chunk(self, chunk: JSONObject) -> JSONObject:
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
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

    def _release(self, index: int, choice: JSONObject) -> None:
        """The choice is finished: what it held goes with its last chunk."""
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
    """How many last characters of `text` begin `key`."""
    start = max(0, len(text) - len(key) + 1)
    while (start := text.find(key[:1], start)) >= 0:
        if key.startswith(text[start:]):
            return len(text) - start
        start += 1
    return 0
