"""Do the tests mirror the modules: for each module `<package>/<folder>/<mod>.py`, is there a
`<tests>/<folder>/test_<mod>.py` (issue 35; httpx mirrors 62% of its modules, starlette 75%).

    python bench/test_mirror.py                          # sanctum_proxy against tests/
    python bench/test_mirror.py PACKAGE_DIR TESTS_DIR    # any package and its tests folder

Counted: every module but `__init__.py`, `__main__.py` and modules without a function or method of their own
(type-only or re-export modules: nothing there to call). A private module `_client.py` is mirrored by
`test_client.py` too. Prints the share, then the modules without a mirror and those left out of the count.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

SHIMS = {"__init__.py", "__main__.py"}


@dataclass
class Mirror:
    mirrored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        counted = len(self.mirrored) + len(self.missing)
        return len(self.mirrored) / counted if counted else 0.0


def has_behaviour(source: str) -> bool:
    """Whether the module defines a function or a method (a module of types, constants or imports does not)."""
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) for node in ast.walk(ast.parse(source)))


def mirrors(module: Path, package: Path, tests: Path) -> list[Path]:
    """The test files that would mirror `module` (a path inside `package`)."""
    rel = module.relative_to(package)
    names = {f"test_{rel.stem}.py", f"test_{rel.stem.lstrip('_')}.py"}
    return [tests.joinpath(*rel.parts[:-1], name) for name in sorted(names)]


def measure(package: Path, tests: Path) -> Mirror:
    out = Mirror()
    for module in sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts):
        name = module.relative_to(package.parent).as_posix()
        if module.name in SHIMS or not has_behaviour(module.read_text(encoding="utf-8")):
            out.left_out.append(name)
        elif any(path.is_file() for path in mirrors(module, package, tests)):
            out.mirrored.append(name)
        else:
            out.missing.append(name)
    return out


def report(mirror: Mirror) -> str:
    counted = len(mirror.mirrored) + len(mirror.missing)
    lines = [f"mirrored: {len(mirror.mirrored)} of {counted} modules ({100 * mirror.share:.0f}%)",
             f"left out (shims, no function of their own): {len(mirror.left_out)}: {', '.join(mirror.left_out)}",
             f"without a mirror ({len(mirror.missing)}):"]
    lines += [f"  {name}" for name in mirror.missing]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    root = Path(__file__).resolve().parents[1]
    parser.add_argument("package", nargs="?", type=Path, default=root / "sanctum_proxy")
    parser.add_argument("tests", nargs="?", type=Path, default=root / "tests")
    args = parser.parse_args(argv)
    print(report(measure(args.package, args.tests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
