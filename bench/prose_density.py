"""How dense a package's prose is: words of comments and docstrings per code line, sentences over 40 words,
and history in prose ("Was: ...", issue numbers), per module.

    python bench/prose_density.py sanctum_proxy/upstreams sanctum_proxy/web/auth.py ...

Code lines: non-blank lines outside docstrings that are not comments alone. Docstrings: the first statement of a
module, class or function when it is a string. Sentences split after `.`, `;`, `!` or `?` before a capital.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

LONG = 40
HISTORY = re.compile(r"\bWas:|\bissue \d+|#\d+\b")


@dataclass(frozen=True)
class Prose:
    code: int
    words: int
    long: list[str]
    history: list[str]

    @property
    def ratio(self) -> float:
        return self.words / self.code if self.code else float(self.words)


def measure(source: str) -> Prose:
    tree = ast.parse(source)
    texts: list[str] = []
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                texts.append(first.value.value)
                docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    alone: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            texts.append(token.string.lstrip("#"))
            if token.line.strip().startswith("#"):
                alone.add(token.start[0])
    code = sum(1 for n, line in enumerate(source.splitlines(), 1) if line.strip() and n not in docs | alone)
    flat = [" ".join(text.split()) for text in texts]
    sentences = [s for text in flat for s in re.split(r"(?<=[.;!?])\s+(?=[A-Z`(\"'])", text)]
    return Prose(code, sum(len(text.split()) for text in flat), [s for s in sentences if len(s.split()) > LONG],
                 [text for text in flat if HISTORY.search(text)])


def main(paths: list[str]) -> None:
    files = [f for p in map(Path, paths) for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    code = words = 0
    for file in files:
        prose = measure(file.read_text())
        code, words = code + prose.code, words + prose.words
        print(f"{str(file):50} code {prose.code:5} words {prose.words:5} ratio {prose.ratio:5.2f} "
              f"long {len(prose.long):2} history {len(prose.history)}")
    print(f"{'total':50} code {code:5} words {words:5} ratio {words / max(code, 1):5.2f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["sanctum_proxy"])
