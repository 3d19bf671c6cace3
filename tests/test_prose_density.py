"""bench/prose_density.py counts what it says: comment and docstring words over code lines (docstrings and lone
comments are not code), sentences over 40 words, and history written into prose."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "prose_density.py"
LONG = " ".join(["Word"] + ["word"] * 40) + "."

SOURCE = f'''"""A module summary.

Was: a history line. {LONG}
"""

# a lone comment of six words


def f(x: int) -> int:
    """One line."""
    return x  # two words
'''


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prose_density", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["prose_density"] = module
    spec.loader.exec_module(module)
    return module


def test_words_over_code_lines_long_sentences_and_history() -> None:
    prose = _script().measure(SOURCE)
    assert prose.code == 2  # the def and the return
    assert prose.words == 3 + 4 + 41 + 6 + 2 + 2  # summary, "Was: a history line.", the long one, comments, "One line."
    assert len(prose.long) == 1 and len(prose.history) == 1
    assert prose.ratio == prose.words / 2
