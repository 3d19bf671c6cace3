"""Tool schemas as untrusted input: what a client's `parameters` may ask, validated at bounded cost.

References never leave the schema and patterns run on RE2; budgets (docs/contract.md) bound the rest. A pattern's
cost is its RE2 program (compile time and memory grow with its instructions): one request's patterns may hold
MAX_REQUEST_PROGRAM instructions in all, and the compiled programs kept between requests MAX_CACHED_PROGRAM.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from sanctum_proxy.core.shapes import JSONValue

REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
MAX_PATTERN_CHARS = 1000
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_EXPANSION = 100_000  # subschemas, every $ref followed
MAX_PATTERNS = 128  # in one request's tools
RE2_MAX_MEM = 1 << 20  # bytes per pattern program
MAX_REQUEST_PROGRAM = 200_000  # RE2 instructions of one request's patterns (about 55 ms to compile, 2.5 MB)
MAX_CACHED_PROGRAM = 1_000_000  # RE2 instructions of the programs kept between requests (about 12 MB)
MAX_CACHED_PATTERNS = 256


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
    """Subschemas one value's validation may visit, each local `$ref` expanded per use."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def target(ref: str) -> Any:
        node: Any = schema
        if ref == "#":
            return node
        if not ref.startswith("#/"):
            return None  # counted as one
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping):
                node = node.get(key)
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    def size(node: Any) -> int:
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
    """Whether validation may visit a subschema more than once per value."""
    return any(key in _BRANCHING for key, _ in _keywords(schema))


def pattern_count(schema: JSONValue) -> int:
    count = 0
    for key, value in _keywords(schema):
        if key == "pattern" and isinstance(value, str):
            count += 1
        elif key == "patternProperties" and isinstance(value, Mapping):
            count += len(value)
    return count


def program_size(schema: JSONValue, budget: int) -> int:
    """The RE2 instructions of `schema`'s patterns, compiled in turn until they pass `budget` (a pattern RE2
    refuses counts nothing here: `refusal` names it)."""
    total = 0
    for key, value in _keywords(schema):
        found = [value] if key == "pattern" else list(value) if key == "patternProperties" and isinstance(
            value, Mapping) else []
        for pattern in found:
            if isinstance(pattern, str) and len(pattern) <= MAX_PATTERN_CHARS:
                with contextlib.suppress(re2.error):
                    total += compiled(pattern).programsize
            if total > budget:
                return total
    return total


def _unresolvable(schema: Mapping[str, object]) -> str | None:
    """A local `$ref` that points at nothing; nested `$id`s are left to the validator."""
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


class Programs:
    """Compiled patterns, least recently used dropped first past MAX_CACHED_PROGRAM instructions in all."""

    def __init__(self, budget: int = MAX_CACHED_PROGRAM, most: int = MAX_CACHED_PATTERNS) -> None:
        self._kept: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # judged on the offload threads too
        self.budget, self.most, self.size = budget, most, 0

    def __call__(self, pattern: str) -> Any:
        """Raises re2.error when RE2 cannot compile `pattern`."""
        with self._lock:
            program = self._kept.get(pattern)
            if program is not None:
                self._kept.move_to_end(pattern)
                return program
        program = re2.compile(pattern, _QUIET)
        with self._lock:
            if pattern not in self._kept:
                self._kept[pattern] = program
                self.size += program.programsize
            while self._kept and (self.size > self.budget or len(self._kept) > self.most):
                _, dropped = self._kept.popitem(last=False)
                self.size -= dropped.programsize
        return program

    def __len__(self) -> int:
        return len(self._kept)


compiled = Programs()


_QUIET = re2.Options()
_QUIET.log_errors = False  # the client's error, not a stderr line
_QUIET.max_mem = RE2_MAX_MEM  # refused early, not compiled


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches in `text`; a refused pattern matches nothing."""
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


# Only the specifications' meta-schemas resolve; nothing is fetched.
NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


# --- keywords on RE2, not Python's backtracking `re` --------------------------------------------------------

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
    properties = properties if isinstance(properties, dict) else {}
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


def _canonical(value: Any) -> Hashable:
    """A hashable form, equal for values JSON Schema calls equal."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list | tuple):
        return ("a", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("z", None) if value is None else ("?", repr(value))


def _first_repeat(items: list[Any]) -> tuple[int, int] | None:
    """The indexes of the first repeated item and its earlier equal."""
    seen: dict[Hashable, int] = {}
    for index, item in enumerate(items):
        earlier = seen.setdefault(_canonical(item), index)
        if earlier != index:
            return earlier, index
    return None


def _unique_items(validator: Any, wanted: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """`uniqueItems` in linear time: jsonschema compares every pair of objects."""
    if wanted and validator.is_type(instance, "array"):
        repeat = _first_repeat(instance)
        if repeat is not None:
            yield ValidationError(f"items {repeat[0]} and {repeat[1]} are equal: the array has non-unique "
                                  "elements (uniqueItems)")


_ON_RE2 = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties, "uniqueItems": _unique_items}


# --- the step budget ---------------------------------------------------------------------------------------

class StepsExhausted(Exception):
    """Validation applied more keywords than `steps` allowed."""


_LEFT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("sanctum_schema_steps", default=None)


@contextlib.contextmanager
def steps(budget: int) -> Iterator[None]:
    """Validations inside may apply `budget` keywords in all, then raise StepsExhausted."""
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
    """A validator for `schema`'s dialect, patterns on RE2, references kept inside."""
    base = validators.validator_for(schema, default=validators.Draft202012Validator)
    validator: Validator = _on_re2(base)(schema, registry=NO_RETRIEVAL)
    return validator


def check_schema(schema: Mapping[str, object]) -> None:
    """Raise SchemaError when `schema` is invalid under its meta-schema."""
    validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
