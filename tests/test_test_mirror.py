"""bench/test_mirror.py counts what it says: a module with a function of its own is mirrored by
tests/<folder>/test_<mod>.py (a private `_mod.py` by test_mod.py too); shims and type-only modules are left out."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "test_mirror.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_mirror_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_mirror_script"] = module
    spec.loader.exec_module(module)
    return module


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_mirrored_missing_and_left_out(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.core.a import f\n",
        "pkg/__main__.py": "def main() -> None: ...\n",
        "pkg/top.py": "def g() -> int:\n    return 1\n",
        "pkg/core/a.py": "def f() -> int:\n    return 1\n",
        "pkg/core/b.py": "class B:\n    def m(self) -> None: ...\n",
        "pkg/core/_c.py": "async def h() -> None: ...\n",
        "pkg/core/types.py": "from typing import TypedDict\nclass T(TypedDict):\n    x: int\nN = 3\n",
        "tests/test_top.py": "",
        "tests/core/test_a.py": "",
        "tests/core/test_c.py": "",
        "tests/test_b.py": "",  # not in the mirrored folder
    })
    mirror = _script().measure(tmp_path / "pkg", tmp_path / "tests")
    assert mirror.mirrored == ["pkg/core/_c.py", "pkg/core/a.py", "pkg/top.py"]
    assert mirror.missing == ["pkg/core/b.py"]
    assert mirror.left_out == ["pkg/__init__.py", "pkg/__main__.py", "pkg/core/types.py"]
    assert mirror.share == 0.75
    assert _script().report(mirror).splitlines()[0] == "mirrored: 3 of 4 modules (75%)"
