"""Whether a call's argument values come from the conversation or were made up.

A grammar makes a call well-formed, not meant. A call is ungrounded when none of its values is in the
conversation, or one is a prompt's example placeholder. Schema-given values, booleans and nulls prove nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from sanctum_proxy.core.calls import COPIED_EXAMPLES, Problem, ToolCall, content_text, is_example_hint
from sanctum_proxy.core.shapes import JSONValue
from sanctum_proxy.repair.toolbox import Toolbox

MAX_TEXT_CHARS = 200_000
MAX_VALUES = 256
_NUMBER = re.compile(r"(?<![\w.])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(%|\s*(?:thousand|million|billion)\b)?")
_SCALE = {"%": 0.01, "thousand": 1e3, "million": 1e6, "billion": 1e9}
_WORD = re.compile(r"[^\W\d_]{3,}")
_SPACE = re.compile(r"\s+")
_NUMBER_WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


@dataclass(frozen=True)
class Evidence:
    """What the conversation holds, read once per request."""

    text: str  # lower-cased
    squeezed: str  # ... and without whitespace
    numbers: frozenset[float]
    words: frozenset[str]

    @classmethod
    def of(cls, messages: JSONValue) -> Evidence:
        text = "\n".join(_texts(messages))[:MAX_TEXT_CHARS].lower()
        numbers: set[float] = set()
        for m in _NUMBER.finditer(text):
            value = float(m.group(1).replace(",", ""))
            numbers.add(value)
            if m.group(2):
                numbers.add(value * _SCALE[m.group(2).strip()])
        words = frozenset(_WORD.findall(text))
        numbers.update(float(n) for w, n in _NUMBER_WORDS.items() if w in words)
        return cls(text, _SPACE.sub("", text), frozenset(numbers), words)

    def holds(self, value: str | float) -> bool:
        if isinstance(value, str):
            low = value.strip().lower()
            return (low in self.text or _SPACE.sub("", low) in self.squeezed
                    or any(w in self.words for w in _WORD.findall(low)))
        return float(value) in self.numbers


def ungrounded(arguments: JSONValue, parameters: Mapping[str, Any], evidence: Evidence) -> list[str]:
    """The made-up values of a call ("weight=1.5"); [] when grounded."""
    if not isinstance(arguments, dict):
        return []
    made_up: list[str] = []
    traced = copied = False
    required = parameters.get("required") if isinstance(parameters, Mapping) else None
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    for key, leaf in islice(_values(arguments, properties), MAX_VALUES):
        if leaf is _EMPTY:
            if isinstance(required, list) and key in required:
                made_up.append(f"{key}={_show(arguments[key])}")
        elif evidence.holds(leaf):
            traced = True
        else:
            made_up.append(f"{key}={_show(leaf)}")
            copied = copied or leaf in COPIED_EXAMPLES or is_example_hint(leaf)
    return made_up if copied or not traced else []


_EMPTY = object()


def _values(arguments: dict[str, Any], properties: Any) -> Iterator[tuple[str, Any]]:
    """(argument, leaf) for each value the schema did not give; empties as `_EMPTY`."""
    for key, value in arguments.items():
        schema = properties.get(key) if isinstance(properties, Mapping) else None
        if isinstance(schema, Mapping) and _given_by_schema(value, schema):
            continue
        if value in ("", [], {}):
            yield key, _EMPTY
            continue
        for leaf in leaves(value):
            yield key, leaf


def _given_by_schema(value: JSONValue, schema: Mapping[str, Any]) -> bool:
    enum = schema.get("enum")
    return (isinstance(enum, list) and value in enum) or ("const" in schema and value == schema["const"]) or (
        "default" in schema and value == schema["default"])


def leaves(value: JSONValue, depth: int = 0) -> Iterator[str | float]:
    """The strings and numbers of a JSON value, bounded."""
    if depth > 8 or isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        yield value
    elif isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, list):
        for item in value[:MAX_VALUES]:
            yield from leaves(item, depth + 1)
    elif isinstance(value, dict):
        for item in list(value.values())[:MAX_VALUES]:
            yield from leaves(item, depth + 1)


def made_up(book: Toolbox, messages: JSONValue, calls: tuple[ToolCall, ...]) -> Problem | None:
    """A made-up call where text could have won; None if any call is grounded."""
    evidence = Evidence.of(messages)
    details: list[str] = []
    for call in calls:
        unfounded = ungrounded(loads(call.arguments), book.tools[call.name].parameters, evidence)
        if not unfounded:
            return None
        details.append(f"{call.name}: " + ", ".join(unfounded) + " appear nowhere in the conversation")
    if not details:
        return None
    tools = {c.name for c in calls}
    raw = "\n".join(c.arguments for c in calls)
    return Problem("ungrounded_arguments", next(iter(tools)) if len(tools) == 1 else None, tuple(details), raw)


def users(messages: JSONValue) -> list[Any]:
    """The user's turns: tool results hold too many values to ground a call."""
    return [m for m in messages if isinstance(m, dict) and m.get("role") == "user"] if isinstance(messages, list) \
        else []


def traced(leaf: str | float, evidence: Evidence) -> bool:
    """The conversation holds this value whole: "Maroon" does not trace "Maroon 5"."""
    if not isinstance(leaf, str):
        return evidence.holds(leaf)
    low = leaf.strip().lower()
    return low in evidence.text or "".join(low.split()) in evidence.squeezed


def key(leaf: str | float) -> str | float:
    """A value as compared: a string stripped and lower-cased, a number a float."""
    return leaf.strip().lower() if isinstance(leaf, str) else float(leaf)


def loads(arguments: str) -> Any:
    """Call arguments as JSON, or None."""
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None


def _texts(messages: JSONValue) -> Iterator[str]:
    if isinstance(messages, list):
        yield from (content_text(m.get("content")) for m in messages if isinstance(m, dict))


def _show(value: JSONValue) -> str:
    text = repr(value) if not isinstance(value, str) else '"' + value[:40] + '"'
    return text[:60]
