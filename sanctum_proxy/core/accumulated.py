"""Stream text that grows piece by piece: appends in constant time, joins only when read."""

from __future__ import annotations


class Accumulated:
    __slots__ = ("_parts", "_size")

    def __init__(self, text: str = "") -> None:
        self._parts: list[str] = [text] if text else []
        self._size = len(text)

    def __iadd__(self, text: str) -> Accumulated:
        if text:
            self._parts.append(text)
            self._size += len(text)
        return self

    def __str__(self) -> str:
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __repr__(self) -> str:
        return f"Accumulated({str(self)!r})"

    def take(self) -> str:
        """The text, and empty from now on."""
        text = str(self)
        self._parts.clear()
        self._size = 0
        return text
