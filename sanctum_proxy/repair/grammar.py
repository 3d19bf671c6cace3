"""GBNF grammars for prompted answers: a call in the round's own prompt format, or (where text may win) text.

llama.cpp's server takes a top-level `grammar` (GBNF) on /v1/chat/completions. A correction round of prompted
mode can then be constrained to a valid call WITHOUT changing its prompt: the format section the first round
was sent stays, byte for byte, and the grammar holds the model to what that section asked for, so the upstream's
prompt cache serves everything before the new turns (docs/contract.md section 5).

    gbnf(book, prompt_format, text=..., parallel=...)   the grammar, or None where the format has none

A format has a grammar when its call is `PREFIX arguments-JSON SUFFIX` as the round's prompt renders it
(families.render_call), with no special tokens (whose text a grammar can match only on some builds) and no
opening that the chat template writes for the model (Functionary v3.2 begins inside `>>>`). The arguments follow
each tool's JSON Schema: objects with their declared properties (required ones always, in order), enums,
consts, anyOf/oneOf, local $refs, arrays, the JSON scalar types; what a grammar cannot hold (pattern, format,
bounds) is left to validation. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

from sanctum_proxy.codecs import families
from sanctum_proxy.repair.toolbox import Toolbox

# Formats whose call is plain text around JSON arguments (see the module docstring for why not the others).
GRAMMAR_FORMATS = frozenset({"hermes", "json", "llama3", "functionary_v31"})
MAX_PARALLEL_CALLS = 8  # several calls at once: a bound, so a small model cannot loop on calls to max_tokens
_ARGS = "\x00SANCTUM_ARGUMENTS\x00"  # not JSON: render_call keeps it verbatim where the arguments go

_JSON_RULES = r"""ws ::= | " " | "\n" [ \t]{0,20}
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"
array ::= "[" ws (value ws ("," ws value ws)*)? "]"
"""


def gbnf(book: Toolbox, prompt_format: str, *, text: bool, parallel: bool) -> str | None:
    """A GBNF grammar for one answer of a prompted round in `prompt_format`: one call to a tool of `book`
    (several, one block each and at most MAX_PARALLEL_CALLS, when `parallel`), or, when `text`, plain text
    that does not begin like a call. None when the format has no grammar or the book no tools."""
    if prompt_format not in GRAMMAR_FORMATS or not book.tools:
        return None
    rules = _Rules()
    calls: list[str] = []
    openings: set[str] = set()
    for name, tool in book.tools.items():
        prefix, _, suffix = families.render_call(prompt_format, name, _ARGS).partition(_ARGS)
        arguments = _Schema(rules, tool.parameters).rule_for(tool.parameters or {"type": "object"})
        calls.append(rules.add(" ".join(p for p in (_literal(prefix), arguments, _literal(suffix)) if p != '""')))
        openings.add(prefix[:1])
    call = rules.add(" | ".join(calls))
    answer = f'{call} ("\\n" {call}){{0,{MAX_PARALLEL_CALLS - 1}}}' if parallel else call
    if text:
        first = "".join(_class_char(c) for c in sorted(openings | {" ", "\t", "\n", "\r"}))
        answer = f"{answer} | [^{first}] [^\\x00]*"
    return f"root ::= {answer}\n" + rules.text() + _JSON_RULES


class _Rules:
    """Named rules of one grammar, one per distinct body."""

    def __init__(self) -> None:
        self._by_body: dict[str, str] = {}
        self._defined: dict[str, str] = {}

    def add(self, body: str, name: str | None = None) -> str:
        if name is None and body in self._by_body:
            return self._by_body[body]
        name = name or f"r{len(self._defined)}"
        self._by_body.setdefault(body, name)
        self._defined[name] = body
        return name

    def reserve(self, stem: str) -> str:
        """A new name, defined later with add(body, name) (a $ref may use itself before its body is known)."""
        name = f"{stem}{len(self._defined)}"
        self._defined[name] = ""
        return name

    def text(self) -> str:
        return "".join(f"{name} ::= {body}\n" for name, body in self._defined.items())


class _Schema:
    """One tool's arguments schema as grammar rules (a $ref becomes a rule of its own, so recursion holds)."""

    def __init__(self, rules: _Rules, root: Any) -> None:
        self.rules = rules
        self.root = root if isinstance(root, dict) else {}
        self.refs: dict[str, str] = {}

    def rule_for(self, schema: Any) -> str:
        """An expression (a rule name or a group) for a value of `schema`."""
        if not isinstance(schema, dict) or not schema:
            return "value"
        if isinstance(schema.get("$ref"), str):
            return self._ref(schema["$ref"])
        if "const" in schema:
            return _literal(_json(schema["const"]))
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return "(" + " | ".join(_literal(_json(v)) for v in schema["enum"]) + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return "(" + " | ".join(self.rule_for(s) for s in schema[key]) + ")"
        kind = schema.get("type")
        if isinstance(kind, list):
            return "(" + " | ".join(self.rule_for({**schema, "type": k}) for k in kind if isinstance(k, str)) + ")"
        if kind == "object" or kind is None and isinstance(schema.get("properties"), dict):
            return self._object(schema)
        if kind == "array":
            return self._array(schema)
        return {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean",
                "null": "null"}.get(str(kind), "value")

    def _ref(self, ref: str) -> str:
        if ref in self.refs:
            return self.refs[ref]
        target: Any = self.root
        if ref.startswith("#/"):
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
        elif ref != "#":
            target = None
        name = self.rules.reserve("ref")
        self.refs[ref] = name
        self.rules.add(self.rule_for(target) if isinstance(target, dict) else "value", name)
        return name

    def _object(self, schema: dict[str, Any]) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            return "object" if schema.get("additionalProperties") is not False else '"{" ws "}"'
        required = [k for k in properties if k in (schema.get("required") or [])]
        optional = [k for k in properties if k not in required]
        pairs = {k: f'{_literal(_json(k))} ws ":" ws {self.rule_for(properties[k])} ws' for k in properties}
        if required:
            body = ' "," ws '.join(pairs[k] for k in required)
            body += "".join(f' ("," ws {pairs[k]})?' for k in optional)
        else:  # which optional property comes first decides where the commas go: after it, a chain of rules,
            # each one optional property (with its comma) and the rule for those after it (linear in the
            # properties; spelling the rest out after each first one grew as their square)
            rest, firsts = "", []
            for i in range(len(optional) - 1, -1, -1):
                firsts.append(f"{pairs[optional[i]]} {rest}".rstrip())
                if i:
                    rest = self.rules.add(f'("," ws {pairs[optional[i]]})? {rest}'.rstrip())
            body = "(" + " | ".join(reversed(firsts)) + ")?"
        return self.rules.add(f'"{{" ws {body} "}}"')

    def _array(self, schema: dict[str, Any]) -> str:
        item = self.rule_for(schema.get("items"))
        minimum = schema.get("minItems")
        more = f'{item} ws ("," ws {item} ws)*'
        body = more if isinstance(minimum, int) and minimum >= 1 else f"({more})?"
        return self.rules.add(f'"[" ws {body} "]"')


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _class_char(c: str) -> str:
    """One character inside a GBNF [...] class."""
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t", "]": "\\]", "\\": "\\\\", "^": "\\^", "-": "\\-"}.get(c, c)
