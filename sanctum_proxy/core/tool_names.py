"""A tool name as a model wrote it mapped to an offered one, for codecs and repair alike; pure, cached."""

from __future__ import annotations

import functools
import re

MAX_NAME_CHARS = 256
_PREFIX = re.compile(r"\A(?:functions?|tools?|default_api)[.:/]", re.I)
_NAMESPACE_SEPARATOR = re.compile(r"[.:/]")
NAMESPACE_JOIN = "__"


def resolve_name(written: str, names: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The offered name `written` stands for and the mends that took; (None, ()) when unknown or ambiguous.

    It mends whitespace, a `functions.` prefix, case, a doubled name, a harmony token, and namespaced names.
    """
    if not isinstance(written, str) or len(written) > MAX_NAME_CHARS:
        return None, ()
    if written in names:
        return written, ()
    if not written:
        return None, ()
    return _resolve(written, names)


@functools.lru_cache(maxsize=4096)
def _resolve(written: str, names: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    repairs: list[str] = []
    name = written
    if "<|" in name and name.split("<|", 1)[0].strip():  # `get_weather<|channel|>commentary`
        name = name.split("<|", 1)[0]
        repairs.append("name_special_tokens")
    if name.strip() != name:
        name = name.strip()
        repairs.append("name_whitespace")
    if _PREFIX.match(name) and name not in names:
        name = _PREFIX.sub("", name, count=1)
        repairs.append("name_prefix")
    if name in names:
        return name, tuple(repairs)
    folded = [n for n in names if n.casefold() == name.casefold()]
    if len(folded) == 1:
        return folded[0], (*repairs, "name_case")
    half = len(name) // 2
    if len(name) % 2 == 0 and half and name[:half] == name[half:] and name[:half] in names:
        return name[:half], (*repairs, "name_repeated")
    joined = _NAMESPACE_SEPARATOR.sub(NAMESPACE_JOIN, name, count=1)  # multi_agent_v1.spawn_agent
    if joined != name and joined in names:
        return joined, (*repairs, "name_namespace")
    qualified = [n for n in names if n.endswith(NAMESPACE_JOIN + name)]  # spawn_agent: one namespace has it
    if len(qualified) == 1 and NAMESPACE_JOIN not in name:
        return qualified[0], (*repairs, "name_namespace")
    return None, ()
