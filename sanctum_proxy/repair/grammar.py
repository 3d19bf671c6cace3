"""GBNF grammars for prompted answers: a call in the round's own prompt format, or (where text may win) text."""

from __future__ import annotations

import json
from typing import Any

import orjson

from sanctum_proxy.codecs.base import gbnf_literal as _literal
from sanctum_proxy.codecs.registry import FORMATS
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.repair.validate import object_keys, typed_values

# Which formats declare none: docs/decisions-repair.md.
GRAMMAR_FORMATS = frozenset(name for name, fmt in FORMATS.items() if fmt.grammar is not None)
MAX_PARALLEL_CALLS = 8  # so a small model cannot loop on calls to max_tokens

# Left to validation; oneOf is held as anyOf, allOf as its merged keywords.
NOT_HELD = frozenset({"pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                      "multipleOf", "minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties",
                      "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "not", "if",
                      "then", "else", "contains", "minContains", "maxContains", "unevaluatedProperties",
                      "unevaluatedItems", "prefixItems"})

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


def gbnf(book: Toolbox, prompt_format: str, *, text: bool, parallel: bool, limit: int | None = None) -> str | None:
    """One answer's grammar: a call (or several), or text not opening like one; GrammarTooLarge past `limit`."""
    fmt = FORMATS.get(prompt_format)
    if fmt is None or fmt.grammar is None or not book.tools:
        return None
    return _gbnf(fmt, book, text=text, parallel=parallel, rules=_Rules(limit))


def _gbnf(fmt: Any, book: Toolbox, *, text: bool, parallel: bool, rules: _Rules) -> str:
    calls: list[str] = []
    openings: set[str] = set()
    written = {name: _Schema(rules, tool.parameters).arguments(tool.parameters) for name, tool in book.tools.items()}
    callable_ = {n: a for n, a in written.items() if a != NEVER} or {n: "object" for n in written}
    for name, arguments in callable_.items():  # a tool no arguments satisfy is left out
        calls.append(rules.add(fmt.grammar(name, arguments)))
        openings.add(fmt.render_call(name, {})[:1])
    call = rules.add(" | ".join(calls))
    answer = f'{call} ("\\n" {call}){{0,{MAX_PARALLEL_CALLS - 1}}}' if parallel else call
    if text:
        first = "".join(_class_char(c) for c in sorted(openings | {" ", "\t", "\n", "\r"}))
        answer = f"{answer} | [^{first}] [^\\x00]*"
    return f"root ::= {answer}\n" + rules.text() + _JSON_RULES


class GrammarTooLarge(Exception):
    """The rules grew past their budget."""


class _Rules:
    """Named rules of one grammar, one per distinct body, within a character budget."""

    def __init__(self, limit: int | None = None) -> None:
        self._by_body: dict[str, str] = {}
        self._defined: dict[str, str] = {}
        self._left = limit

    def add(self, body: str, name: str | None = None) -> str:
        if name is None and body in self._by_body:
            return self._by_body[body]
        if self._left is not None:
            self._left -= len(body) + 16  # the name, ` ::= ` and the newline
            if self._left < 0:
                raise GrammarTooLarge
        name = name or f"r{len(self._defined)}"
        self._by_body.setdefault(body, name)
        self._defined[name] = body
        return name

    def reserve(self, stem: str) -> str:
        """A name defined later: a $ref may use itself before its body is known."""
        name = f"{stem}{len(self._defined)}"
        self._defined[name] = ""
        return name

    def text(self) -> str:
        return "".join(f"{name} ::= {body}\n" for name, body in self._defined.items())


class _Schema:
    """One tool's arguments schema as grammar rules, read as validation reads it."""

    def __init__(self, rules: _Rules, root: Any) -> None:
        self.rules = rules
        self.root = root if isinstance(root, dict) else {}
        self.refs: dict[str, str] = {}

    def arguments(self, schema: Any) -> str:
        """The rule of a tool's arguments object."""
        return self.rule_for(schema if isinstance(schema, dict) and schema else {"type": "object"}, top=True)

    def rule_for(self, schema: Any, top: bool = False) -> str:
        """A rule name or group for a value of `schema`; NEVER where none is valid."""
        if not isinstance(schema, dict) or not schema:
            return "value"
        if isinstance(schema.get("$ref"), str):
            return self._ref(schema["$ref"])
        if "const" in schema:
            return _group(_literal(_json(v)) for v in typed_values([schema["const"]], schema))
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return _group(_literal(_json(v)) for v in typed_values(schema["enum"], schema))
        if isinstance(schema.get("allOf"), list) and all(isinstance(s, dict) for s in schema["allOf"]):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for sub in schema["allOf"]:  # pydantic's $ref wrapper exactly; several: keywords merged
                merged.update(sub)
            return self.rule_for(merged, top)
        for key in ("anyOf", "oneOf"):  # a value two oneOf branches take is left to validation
            if isinstance(schema.get(key), list) and schema[key]:
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                return _group(self.rule_for({**rest, **s} if isinstance(s, dict) else s, top) for s in schema[key])
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str)]
            return _group(self.rule_for({**schema, "type": k}, top) for k in kinds)
        if kind == "object" or kind is None and any(k in schema for k in _OBJECT_KEYWORDS):
            return self._object(schema, top)
        if kind == "array" or kind is None and any(k in schema for k in _ARRAY_KEYWORDS):
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
        body = self.rule_for(target) if isinstance(target, dict) else "value"
        self.rules.add("value" if body == NEVER else body, name)  # a recursive use may have named it
        return name

    def _object(self, schema: JSONObject, top: bool) -> str:
        """Required keys in order, then each optional one or not: linear in the properties."""
        keys = object_keys(schema, top=top)
        if not keys.properties and not keys.required:
            if keys.others is True:
                return "object"
            if keys.others is False:
                return '"{" ws "}"'
            value = self.rule_for(keys.others)
            if value == NEVER:
                return '"{" ws "}"'
            pair = f'string ws ":" ws {value} ws'
            return self.rules.add(f'"{{" ws ({pair} ("," ws {pair})*)? "}}"')
        others = keys.others if isinstance(keys.others, dict) else {}
        values = {k: self.rule_for(keys.properties.get(k, others)) for k in (*keys.required, *keys.optional)}
        if any(values[k] == NEVER for k in keys.required):
            return NEVER
        optional = [k for k in keys.optional if values[k] != NEVER]  # no value valid: never written
        pairs = {k: f'{_literal(_json(k))} ws ":" ws {values[k]} ws' for k in (*keys.required, *optional)}
        if not pairs:
            return '"{" ws "}"'
        if keys.required:
            body = ' "," ws '.join(pairs[k] for k in keys.required)
            if optional:
                body += " " + self._optional([pairs[k] for k in optional], first=False)
        else:
            body = self._optional([pairs[k] for k in optional], first=True) + "?"
        return self.rules.add(f'"{{" ws {body} "}}"')

    def _optional(self, pairs: list[str], *, first: bool) -> str:
        """Optional pairs in order, each there or not, one rule each."""
        after = [""] * (len(pairs) + 1)
        for i in range(len(pairs) - 1, -1, -1):
            after[i] = self.rules.add(f'("," ws {pairs[i]})?' + (f" {after[i + 1]}" if after[i + 1] else ""))
        if not first:
            return after[0]
        start = ""
        for i in range(len(pairs) - 1, -1, -1):
            head = pairs[i] + (f" {after[i + 1]}" if after[i + 1] else "")
            start = self.rules.add(f"{head} | {start}" if start else head)
        return start

    def _array(self, schema: JSONObject) -> str:
        item = self.rule_for(schema.get("items"))
        least = schema.get("minItems")
        if item == NEVER:
            return NEVER if isinstance(least, int) and least > 0 else '"[" ws "]"'
        most = schema.get("maxItems")
        least = least if isinstance(least, int) and not isinstance(least, bool) and least > 0 else 0
        most = most if isinstance(most, int) and not isinstance(most, bool) and most >= least else None
        if most == 0:
            return '"[" ws "]"'
        more = "*" if most is None and least <= 1 else f"{{{max(least - 1, 0)},{'' if most is None else most - 1}}}"
        items = f'{item} ws' if most == 1 else f'{item} ws ("," ws {item} ws){more}'
        return self.rules.add(f'"[" ws {items if least else f"({items})?"} "]"')


_OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "patternProperties")
_ARRAY_KEYWORDS = ("items", "minItems", "maxItems", "prefixItems")


NEVER = "\x00never"  # not GBNF: a schema no value satisfies


def _group(alternatives: Any) -> str:
    options = [o for o in dict.fromkeys(alternatives) if o != NEVER]
    return NEVER if not options else options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer past 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _class_char(c: str) -> str:
    """One character inside a GBNF [...] class."""
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t", "]": "\\]", "\\": "\\\\", "^": "\\^", "-": "\\-"}.get(c, c)
