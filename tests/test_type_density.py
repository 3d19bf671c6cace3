"""bench/type_density.py counts what it says: code lines outside docstrings and comments, `dict[str, Any]` and its
kin written out or behind an alias, every `Any` but the imports, string annotations too."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "type_density.py"

SOURCE = '''"""A module docstring
over two lines."""

from typing import Any, Mapping
import typing

Json = dict[str, Any]  # an alias: its uses count as dict[str, Any]


def f(a: Json, b: Mapping[str, Any], c: "dict[str, Any]") -> typing.Any:
    """A docstring."""
    # a comment, and a string that only mentions dict[str, Any]
    text = "dict[str, Any]"
    return a, b, c, text


def g(x: dict[str, int], y: dict[str, object]) -> Json:
    return {}
'''


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("type_density", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["type_density"] = module
    spec.loader.exec_module(module)
    return module


def test_counts_of_a_small_package(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text(SOURCE)
    td = _script()
    [(name, count)] = td.count_package(package, by_folder=False)
    assert name == "pkg"
    assert count.files == 1
    # from, import, Json =, def f, text =, return, def g, return: 8 lines (docstrings, comments, blanks left out)
    assert count.lines == 8
    # Json's definition, Mapping[str, Any], the string annotation; the plain string is not code
    assert count.str_any == 3
    assert count.aliased == 2  # a: Json and g's return; dict[str, int] and dict[str, object] are no kin
    # Any in: Json's definition, Mapping[str, Any], the string annotation, typing.Any (not the import)
    assert count.any_ == 4


def test_table_per_thousand_lines(tmp_path: Path) -> None:
    td = _script()
    count = td.Count(files=2, lines=2000, str_any=10, aliased=4, any_=30)
    table = td.table([("pkg", count)])
    assert "| pkg | 2 | 2000 | 10 | 4 | 7.0 | 30 | 15.0 |" in table
