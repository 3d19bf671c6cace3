"""core/accumulated.py: text grown by pieces reads as the pieces joined, at every point, and `take` empties it."""

from __future__ import annotations

from sanctum_proxy.core.accumulated import Accumulated


def test_pieces_read_joined_while_it_grows() -> None:
    acc = Accumulated("Hel")
    acc += "lo"
    assert str(acc) == "Hello"
    acc += ""
    acc += ", "
    acc += "world"
    assert (str(acc), len(acc), bool(acc)) == ("Hello, world", 12, True)
    assert repr(acc) == "Accumulated('Hello, world')"


def test_take_reads_and_empties() -> None:
    acc = Accumulated()
    assert (str(acc), len(acc), bool(acc)) == ("", 0, False)
    acc += "a"
    acc += "b"
    assert acc.take() == "ab"
    assert (str(acc), len(acc), bool(acc)) == ("", 0, False)
    acc += "c"
    assert str(acc) == "c"
