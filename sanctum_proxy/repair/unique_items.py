"""The `uniqueItems` keyword in linear time: jsonschema compares every pair of objects."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from jsonschema.exceptions import ValidationError


def canonical(value: Any) -> Hashable:
    """A hashable form, equal for values JSON Schema calls equal."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list | tuple):
        return ("a", tuple(canonical(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, canonical(v)) for k, v in value.items()))
    return ("z", None) if value is None else ("?", repr(value))


def first_repeat(items: list[Any]) -> tuple[int, int] | None:
    """The indexes of the first repeated item and its earlier equal."""
    seen: dict[Hashable, int] = {}
    for index, item in enumerate(items):
        earlier = seen.setdefault(canonical(item), index)
        if earlier != index:
            return earlier, index
    return None


def unique_items(validator: Any, wanted: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if wanted and validator.is_type(instance, "array"):
        repeat = first_repeat(instance)
        if repeat is not None:
            yield ValidationError(f"items {repeat[0]} and {repeat[1]} are equal: the array has non-unique "
                                  "elements (uniqueItems)")
