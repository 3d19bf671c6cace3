"""Tool schemas as untrusted input: what a client's `parameters` may ask of the proxy, and the validator
that honours it at bounded cost.

A tool schema may refer only inside itself (`#...`: a JSON pointer, `$defs` / `definitions`, an anchor);
nothing is ever fetched or read, whatever the `$ref` says (the registry refuses every retrieval as well).
Every `pattern` and `patternProperties` key runs on RE2, a linear-time engine: `^(a+)+$` costs microseconds,
not minutes. A pattern RE2 cannot compile (lookaround, backreferences) is refused, never skipped.

Budgets (docs/contract.md, Budgets): a pattern compiles within RE2_MAX_MEM (a bigger program is refused, so
no pattern costs more than a few milliseconds or a megabyte), one request's tools hold at most
MAX_PATTERNS patterns, and a schema whose `$ref`s and `anyOf` / `allOf` / `oneOf` branches expand to more
than MAX_SCHEMA_EXPANSION subschemas is refused (a chain of `anyOf` of two `$ref`s doubles at each link:
checking arguments against it would walk 2^n branches). What an instance can still multiply (a recursive
schema and deeply nested arguments) is cut by a step budget: `steps(n)` around a validation raises
StepsExhausted once n keywords have been applied.
`refusal(schema)` says why a schema is refused (None when it is not); `validator_class(schema)` is the
jsonschema class to validate with. Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from sanctum_proxy.core.shapes import JSONValue
from sanctum_proxy.repair.unique_items import unique_items

REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
MAX_PATTERN_CHARS = 1000
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_EXPANSION = 100_000  # subschemas, with every $ref followed and every branch counted
MAX_PATTERNS = 128  # patterns (and patternProperties keys) in one request's tools
RE2_MAX_MEM = 1 << 20  # bytes RE2 may use for one pattern's program


def refusal(schema: JSONValue) -> str | None:
    """Why the proxy will not take this tool schema, or None."""
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return f"it is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    unevaluated = patterned = False
    for key, value in _keywords(schema):
        if key in REF_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
            return (f"{key} {value!r} refers outside the schema; only references inside it "
                    "('#/$defs/...', '#/definitions/...', '#/properties/...') are followed, nothing is fetched")
        if key == "pattern" and isinstance(value, str):
            problem = _pattern_problem(value)
            if problem:
                return problem
        if key == "patternProperties" and isinstance(value, Mapping):
            patterned = True
            problem = next(filter(None, (_pattern_problem(p) for p in value if isinstance(p, str))), None)
            if problem:
                return problem
        unevaluated = unevaluated or key == "unevaluatedProperties"
    if unevaluated and patterned:
        return "unevaluatedProperties together with patternProperties is not supported"
    if not isinstance(schema, Mapping):
        return None
    return _unresolvable(schema) or _over_expanded(schema)


def _over_expanded(schema: Mapping[str, object]) -> str | None:
    try:
        size = expansion(schema)
    except RecursionError:
        return "its $refs lead through one another too deeply"
    if size <= MAX_SCHEMA_EXPANSION:
        return None
    return (f"its $refs and anyOf / allOf / oneOf branches expand to more than {MAX_SCHEMA_EXPANSION} subschemas "
            f"(about {min(size, 10**12)}): checking arguments against it would take too long")


def expansion(schema: Mapping[str, object]) -> int:
    """How many subschemas validation may visit for one value: the schema's nodes with each local `$ref`
    replaced by what it points at, counted once per use (a ref back into itself counts 1: that recursion
    goes only as deep as the arguments). Linear in the schema (each node is sized once)."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def target(ref: str) -> Any:
        node: Any = schema
        if ref == "#":
            return node
        if not ref.startswith("#/"):
            return None  # an anchor or a relative $id: counted as one
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping):
                node = node.get(key)
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    def size(node: Any) -> int:  # the depth is bounded (MAX_SCHEMA_DEPTH) before this runs
        if not isinstance(node, Mapping | list):
            return 0
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in busy:
            return 1
        busy.add(key)
        total = 1 + sum(size(child) for child in (node.values() if isinstance(node, Mapping) else node))
        ref = node.get("$ref") if isinstance(node, Mapping) else None
        if isinstance(ref, str):
            total += size(target(ref))
        busy.discard(key)
        sizes[key] = total
        return total

    return size(schema)


_BRANCHING = frozenset({"anyOf", "oneOf", "allOf", "if", "not", "dependentSchemas", *REF_KEYWORDS})


def branches(schema: JSONValue) -> bool:
    """Whether the schema uses a keyword whose validation may visit a subschema more than once per value."""
    return any(key in _BRANCHING for key, _ in _keywords(schema))


def pattern_count(schema: JSONValue) -> int:
    """The patterns a schema holds (`pattern` values and `patternProperties` keys)."""
    count = 0
    for key, value in _keywords(schema):
        if key == "pattern" and isinstance(value, str):
            count += 1
        elif key == "patternProperties" and isinstance(value, Mapping):
            count += len(value)
    return count


def _unresolvable(schema: Mapping[str, object]) -> str | None:
    """A local reference that points at nothing, found now rather than when the model's arguments are
    checked (where it could only be skipped). Schemas with nested `$id`s change the base of their refs:
    those are left to the validator, whose registry still fetches nothing."""
    refs = [v for k, v in _keywords(schema) if k in REF_KEYWORDS and isinstance(v, str)]
    nested_ids = sum(1 for k, v in _keywords(schema) if k in ("$id", "id") and isinstance(v, str))
    if not refs or nested_ids > (1 if isinstance(schema.get("$id", schema.get("id")), str) else 0):
        return None
    spec = referencing.jsonschema.specification_with(
        str(schema.get("$schema", "")), default=referencing.jsonschema.DRAFT202012)
    resolver = NO_RETRIEVAL.resolver_with_root(spec.create_resource(schema))
    for ref in refs:
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            return f"$ref {ref!r} points at nothing inside the schema"
    return None


def _keywords(schema: JSONValue) -> Iterator[tuple[str, JSONValue]]:
    """Every (key, value) of every object in the schema, iteratively (depth is checked before)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                yield key, value
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _depth(schema: JSONValue) -> int:
    deepest, stack = 0, [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            return depth
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _pattern_problem(pattern: str) -> str | None:
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"pattern {pattern[:40]!r}... is longer than {MAX_PATTERN_CHARS} characters"
    try:
        compiled(pattern)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        if "too large" in str(why):
            return (f"pattern {pattern[:80]!r} compiles to a program larger than the proxy's budget of "
                    f"{RE2_MAX_MEM // 1024} KiB per pattern (RE2): {why}")
        return (f"pattern {pattern!r} cannot be run in linear time (the proxy checks patterns with RE2, "
                f"which has no lookaround or backreferences): {why}")
    return None


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> Any:
    """The RE2 program for `pattern` (raises re2.error when RE2 cannot compile it)."""
    return re2.compile(pattern, _QUIET)


_QUIET = re2.Options()
_QUIET.log_errors = False  # a refused pattern is the client's answer, not a line on the proxy's stderr
_QUIET.max_mem = RE2_MAX_MEM  # a huge program is refused early, not compiled (bench/results/design_costs.md)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (RE2); a pattern RE2 refuses matches nothing."""
    try:
        program = compiled(pattern)
    except re2.error:
        return False
    try:
        return program.search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate from a repaired string
        return program.search(text.encode("utf-8", "replace").decode("utf-8")) is not None


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


# Only the specifications' own meta-schemas are known; any other URI is unresolvable, never fetched.
NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


# --- the keywords that would run Python's backtracking `re`, on RE2 instead -------------------------------

def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and isinstance(pattern, str) and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, object], schema: Mapping[str, object]) -> list[str]:
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    properties = properties if isinstance(properties, dict) else {}  # dicts: check_schema checked the schema
    patterns = patterns if isinstance(patterns, dict) else {}
    return [k for k in instance if k not in properties and not any(search(p, k) for p in patterns)]


def _additional_properties(validator: Any, addl: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(addl, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], addl, path=extra)
    elif not addl and extras:
        listed = ", ".join(repr(e) for e in sorted(extras, key=str))
        if "patternProperties" in schema:
            regexes = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{listed} {'does' if len(extras) == 1 else 'do'} not match any of the "
                                  f"regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


_ON_RE2 = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties, "uniqueItems": unique_items}  # (that one: linear)


# --- the step budget ---------------------------------------------------------------------------------------

class StepsExhausted(Exception):
    """Validation applied more keywords than its budget allowed (`steps`)."""


_LEFT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("sanctum_schema_steps", default=None)


@contextlib.contextmanager
def steps(budget: int) -> Iterator[None]:
    """Validations run inside may apply at most `budget` keywords in all; the next one raises StepsExhausted."""
    token = _LEFT.set([budget])
    try:
        yield
    finally:
        _LEFT.reset(token)


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        left = _LEFT.get()
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise StepsExhausted
        return keyword(validator, value, instance, schema)
    return counted


@functools.cache
def _on_re2(base: type[Validator]) -> type[Validator]:
    keywords = {**base.VALIDATORS, **_ON_RE2}
    cls: type[Validator] = validators.extend(base, {k: _counted(v) for k, v in keywords.items()})
    return cls


def validator_for(schema: Mapping[str, object]) -> Validator:
    """A validator for `schema` (its `$schema` dialect, 2020-12 by default) whose patterns run on RE2 and
    whose references never leave it."""
    base = validators.validator_for(schema, default=validators.Draft202012Validator)
    validator: Validator = _on_re2(base)(schema, registry=NO_RETRIEVAL)
    return validator


def check_schema(schema: Mapping[str, object]) -> None:
    """Raise jsonschema's SchemaError when `schema` is not valid under its meta-schema."""
    validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
