"""A sampler for the GBNF subset sanctum_proxy.repair.grammar writes: random strings the grammar accepts.

    Grammar(text).sample(random.Random(seed))   one string the grammar's `root` accepts
    Grammar(text).shortest()                    the shortest one

The subset is llama.cpp's GBNF as the proxy writes it: one rule per line (`name ::= body`), string literals
with the escapes \\\\ \\" \\n \\r \\t \\xHH \\uHHHH, character classes `[...]` / `[^...]` with ranges and the same
escapes, groups, alternatives (an empty alternative too), rule references, and the postfix operators ? * +
{m} {m,} {m,n}. Deep in the recursion every rule and repetition turns to its shortest expansion, so a sample
always ends. Characters for a class are drawn from a pool that holds ASCII, control characters and a few
non-ASCII ones (a class the pool cannot fill raises)."""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

_POOL = [chr(c) for c in range(0x00, 0x80)] + ["é", "ß", "中", "\u2028", "😀", "\u00a0", "Ω"]
MAX_DEPTH = 24  # past this depth of rule references, the shortest expansion is taken
MAX_REPEAT = 4  # an unbounded repetition repeats at most this many times beyond its minimum


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    negated: bool
    ranges: tuple[tuple[str, str], ...]

    def holds(self, c: str) -> bool:
        inside = any(lo <= c <= hi for lo, hi in self.ranges)
        return inside != self.negated

    @functools.cached_property
    def choices(self) -> list[str]:
        return [c for c in _POOL if self.holds(c)]


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Alt:
    options: tuple[tuple[Node, ...], ...]


@dataclass(frozen=True)
class Rep:
    item: Node
    least: int
    most: int | None


Node = Lit | Cls | Ref | Alt | Rep

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "]": "]", "[": "[", "-": "-", "^": "^",
            "/": "/"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def error(self, why: str) -> ValueError:
        return ValueError(f"{why} at {self.at}: {self.text[self.at:self.at + 40]!r}")

    def space(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t":
            self.at += 1

    def alternatives(self) -> Alt:
        options = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            options.append(self.sequence())
        return Alt(tuple(options))

    def peek(self) -> str:
        self.space()
        return self.text[self.at] if self.at < len(self.text) else ""

    def sequence(self) -> tuple[Node, ...]:
        items: list[Node] = []
        while (c := self.peek()) and c not in "|)":
            items.append(self.postfix(self.atom()))
        return tuple(items)

    def atom(self) -> Node:
        c = self.peek()
        if c == '"':
            return Lit(self.literal())
        if c == "[":
            return self.char_class()
        if c == "(":
            self.at += 1
            inner = self.alternatives()
            if self.peek() != ")":
                raise self.error("no closing )")
            self.at += 1
            return inner
        name = re.compile(r"[a-zA-Z0-9-]+").match(self.text, self.at)
        if name is None:
            raise self.error("unexpected character")
        self.at = name.end()
        return Ref(name.group())

    def postfix(self, node: Node) -> Node:
        while True:
            c = self.text[self.at] if self.at < len(self.text) else ""
            if c == "?":
                node, self.at = Rep(node, 0, 1), self.at + 1
            elif c == "*":
                node, self.at = Rep(node, 0, None), self.at + 1
            elif c == "+":
                node, self.at = Rep(node, 1, None), self.at + 1
            elif c == "{":
                bounds = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.text, self.at)
                if bounds is None:
                    raise self.error("bad repetition")
                least = int(bounds.group(1))
                most = least if bounds.group(2) is None else int(bounds.group(3)) if bounds.group(3) else None
                node, self.at = Rep(node, least, most), bounds.end()
            else:
                return node

    def char(self) -> str:
        c = self.text[self.at]
        if c != "\\":
            self.at += 1
            return c
        kind = self.text[self.at + 1]
        if kind in "xu":
            width = 2 if kind == "x" else 4
            code = self.text[self.at + 2:self.at + 2 + width]
            self.at += 2 + width
            return chr(int(code, 16))
        self.at += 2
        if kind not in _ESCAPES:
            raise self.error(f"unknown escape \\{kind}")
        return _ESCAPES[kind]

    def literal(self) -> str:
        self.at += 1
        out = []
        while self.text[self.at] != '"':
            out.append(self.char())
        self.at += 1
        return "".join(out)

    def char_class(self) -> Cls:
        self.at += 1
        negated = self.text[self.at] == "^"
        self.at += negated
        ranges = []
        while self.text[self.at] != "]":
            lo = self.char()
            hi = lo
            if self.text[self.at] == "-" and self.text[self.at + 1] != "]":
                self.at += 1
                hi = self.char()
            ranges.append((lo, hi))
        self.at += 1
        return Cls(negated, tuple(ranges))


class Grammar:
    def __init__(self, text: str) -> None:
        self.rules: dict[str, Alt] = {}
        for line in text.split("\n"):  # not splitlines: a literal may hold U+2028
            if not line.strip():
                continue
            name, sep, body = line.partition(" ::= ")
            if not sep:
                raise ValueError(f"not a rule: {line!r}")
            parser = _Parser(body)
            self.rules[name.strip()] = parser.alternatives()
            if parser.peek():
                raise parser.error("trailing text")
        self._short: dict[str, str | None] = {}
        self._settle_shortest()

    def _settle_shortest(self) -> None:
        """The shortest expansion of every rule, by a fixed point (a rule that only recurses has none)."""
        known: dict[str, str | None] = dict.fromkeys(self.rules)
        changed = True
        while changed:
            changed = False
            for name, body in self.rules.items():
                found = self._shortest(body, known)
                if found is not None and (known[name] is None or len(found) < len(known[name] or "")):
                    known[name], changed = found, True
        self._short = known

    def _shortest(self, node: Node, known: dict[str, str | None]) -> str | None:
        if isinstance(node, Lit):
            return node.text
        if isinstance(node, Cls):
            return node.choices[0] if node.choices else None
        if isinstance(node, Ref):
            if node.name not in known:
                raise ValueError(f"rule {node.name} is not defined")
            return known[node.name]
        if isinstance(node, Rep):
            one = self._shortest(node.item, known) if node.least else ""
            return None if one is None else one * node.least
        best: str | None = None
        for option in node.options:
            parts = [self._shortest(item, known) for item in option]
            if all(p is not None for p in parts):
                text = "".join(p for p in parts if p is not None)
                best = text if best is None or len(text) < len(best) else best
        return best

    def shortest(self, rule: str = "root") -> str:
        found = self._short[rule]
        if found is None:
            raise ValueError(f"rule {rule} matches no finite string")
        return found

    def sample(self, rng: random.Random, rule: str = "root") -> str:
        out: list[str] = []
        self._emit(self.rules[rule], rng, 0, out)
        return "".join(out)

    def _emit(self, node: Node, rng: random.Random, depth: int, out: list[str]) -> None:
        if depth > MAX_DEPTH:
            short = self._shortest(node, self._short)
            if short is None:
                raise ValueError("no finite expansion")
            out.append(short)
            return
        if isinstance(node, Lit):
            out.append(node.text)
        elif isinstance(node, Cls):
            if not node.choices:
                raise ValueError(f"no character of the pool fits {node}")
            out.append(rng.choice(node.choices))
        elif isinstance(node, Ref):
            self._emit(self.rules[node.name], rng, depth + 1, out)
        elif isinstance(node, Rep):
            most = node.least + MAX_REPEAT if node.most is None else node.most
            for _ in range(rng.randint(node.least, max(node.least, most))):
                self._emit(node.item, rng, depth + 1, out)
        else:
            viable = [o for o in node.options if all(self._shortest(i, self._short) is not None for i in o)]
            for item in rng.choice(viable):
                self._emit(item, rng, depth, out)
