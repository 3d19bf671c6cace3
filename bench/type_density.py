"""How loosely typed a package is: `dict[str, Any]` and `Any` per 1,000 lines of code (issue 35).

    python bench/type_density.py                     # sanctum_proxy, starlette, httpx (as installed)
    python bench/type_density.py path/to/pkg ...     # any package directories
    python bench/type_density.py --by-folder         # also one row per subfolder of each package

Lines of code: physical lines that hold a token other than a comment or a line break, outside docstrings (any
statement that is a bare string literal). Counted on the syntax tree, so comments and strings never count:
- `dict[str, Any]`: a subscript `dict`, `Dict`, `Mapping` or `MutableMapping` of `[str, Any]` (`typing.` or not),
  plus each use of a name the package binds to one (`Json = dict[str, Any]`), so an alias hides nothing;
- `Any`: each `Any` or `typing.Any` in the tree (imports are not counted), including those inside the
  `dict[str, Any]`s above; string annotations are parsed and counted too.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}


@dataclass
class Count:
    files: int = 0
    lines: int = 0
    str_any: int = 0  # dict[str, Any] and its kin, written out
    aliased: int = 0  # uses of a name bound to one
    any_: int = 0

    def add(self, other: Count) -> None:
        self.files += other.files
        self.lines += other.lines
        self.str_any += other.str_any
        self.aliased += other.aliased
        self.any_ += other.any_


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_str_any(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Subscript) and _name(node.value) in MAPPINGS):
        return False
    key = node.slice
    return (isinstance(key, ast.Tuple) and len(key.elts) == 2 and _name(key.elts[0]) == "str"
            and _name(key.elts[1]) == "Any")


def _annotations(tree: ast.AST) -> Iterator[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            yield node.annotation
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            yield node.returns


def _trees(tree: ast.AST) -> Iterator[ast.AST]:
    """The module's tree, then each string annotation parsed (`x: "dict[str, Any]"`)."""
    yield tree
    for annotation in _annotations(tree):
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                try:
                    yield ast.parse(node.value, mode="eval")
                except SyntaxError:
                    pass


def aliases(tree: ast.AST) -> set[str]:
    """Names bound to a `dict[str, Any]` (`Json = dict[str, Any]`, `Json: TypeAlias = ...`, `type Json = ...`)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_str_any(node.value):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and node.value is not None and _is_str_any(node.value):
            if isinstance(node.target, ast.Name):
                out.add(node.target.id)
    return out


def code_lines(source: str, tree: ast.AST) -> int:
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def count_file(path: Path, alias_names: set[str]) -> Count:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    out = Count(files=1, lines=code_lines(source, tree))
    for sub in _trees(tree):
        for node in ast.walk(sub):
            if _is_str_any(node):
                out.str_any += 1
            elif isinstance(node, ast.Name) and node.id in alias_names and isinstance(node.ctx, ast.Load):
                out.aliased += 1
            if isinstance(node, ast.Name | ast.Attribute) and _name(node) == "Any":
                out.any_ += 1
    return out


def files(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def count_package(package: Path, by_folder: bool) -> list[tuple[str, Count]]:
    paths = files(package)
    alias_names: set[str] = set()
    for path in paths:
        alias_names |= aliases(ast.parse(path.read_text(encoding="utf-8")))
    total = Count()
    folders: dict[str, Count] = {}
    for path in paths:
        one = count_file(path, alias_names)
        total.add(one)
        rel = path.relative_to(package)
        folder = f"{package.name}/{rel.parts[0]}/" if len(rel.parts) > 1 else f"{package.name}/ (top)"
        folders.setdefault(folder, Count()).add(one)
    rows = [(package.name, total)]
    if by_folder:
        rows += sorted(folders.items())
    return rows


def _per_k(n: int, lines: int) -> str:
    return f"{1000 * n / lines:.1f}" if lines else "-"


def table(rows: list[tuple[str, Count]]) -> str:
    out = ["| package | files | lines of code | dict[str, Any] | + aliased | per 1k lines (both) | Any | Any per 1k |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, c in rows:
        out.append(f"| {name} | {c.files} | {c.lines} | {c.str_any} | {c.aliased} | "
                   f"{_per_k(c.str_any + c.aliased, c.lines)} | {c.any_} | {_per_k(c.any_, c.lines)} |")
    return "\n".join(out)


def default_packages() -> list[Path]:
    import httpx
    import starlette

    import sanctum_proxy
    return [Path(m.__file__).parent for m in (sanctum_proxy, starlette, httpx) if m.__file__]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("packages", nargs="*", type=Path, help="package directories (default: sanctum_proxy, "
                                                                "starlette, httpx)")
    parser.add_argument("--by-folder", action="store_true", help="one row per subfolder as well")
    args = parser.parse_args(argv)
    rows: list[tuple[str, Count]] = []
    for package in args.packages or default_packages():
        rows += count_package(package, args.by_folder)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
