"""Which upstream errors mean "this server cannot do tools" (auto mode flips for good) or "it could not
parse its own model's call" (retry this request prompted; flip after a threshold). An unrelated error never
flips anything. Pure: read from the error's status and message only.

Only the upstream's own words count: a server that quotes the request in its errors (a validation message
that echoes a field) must not let one client flip a model to prompted for every client by writing "does not
support tools" in a message. Every string the request sent holds (4 characters or more, as decoded and as
JSON-escaped) is cut out of the message before it is read, so a phrase made of the client's text, whole or
pieced together from several fields, never matches. Kept: keys that are plain words (`tools`, `tool_choice`)
and the chat protocol's own values (`user`, `function`, `auto`): none of them makes a phrase alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

import orjson

from sanctum_proxy.errors import UpstreamError

Verdict = Literal["tools_unsupported", "upstream_parse_failure"]

# Real rejection bodies: llama.cpp without --jinja (500 "tools param requires --jinja flag", its tools/server/
# server-common.cpp), Ollama ("<model> does not support tools", 400; ollama/ollama#13578), vLLM without
# --enable-auto-tool-choice, older llama.cpp ("Unsupported param: tools", ggml-org/llama.cpp#10920), and the
# generic wording other servers use; the fake upstream in tests/fakes/upstream.py sends the same bodies.
_UNSUPPORTED = re.compile(
    r"tools? param requires --jinja"
    r"|tool_choice param requires --jinja"
    r"|does not support tools"
    r"|auto\"? tool choice requires --enable-auto-tool-choice"
    r"|enable-auto-tool-choice"
    r"|unsupported param: tools"
    r"|(tools?|tool[ _]calls?|function[ _]calling|functions)\b[^.]{0,40}\b(not|isn't|is not|are not|aren't)"
    r" (supported|available|enabled|allowed)"
    r"|(does not|doesn't|do not|cannot|can't) (support|handle|use) (tools|tool[ _]calls?|function[ _]calling)"
    r"|unrecognized request argument supplied: tools"
    r"|extra inputs are not permitted[^.]{0,40}tools",
    re.IGNORECASE,
)
_PARSE_FAILURE = re.compile(
    r"does not match the expected .{0,40}format|failed to parse input at pos|invalid diff", re.IGNORECASE)


MAX_MESSAGE = 4000  # of the upstream's message read (its own verdict comes first, not after pages of echo)
MIN_ECHO = 4  # shorter strings of the request are not cut out (a model name "m" would cut every m)
MAX_STRINGS = 100_000  # a request with more strings than this teaches nothing (the walk would cost too much)
_WORD_KEY = re.compile(r"[a-z_]+")
_PROTOCOL_VALUES = frozenset({
    "user", "assistant", "system", "developer", "tool", "function", "auto", "none", "required", "object",
    "string", "number", "integer", "boolean", "array", "null", "text", "image_url", "json_object", "json_schema",
})


def classify(error: UpstreamError, sent: Any = None) -> Verdict | None:
    """The verdict on `error`, an answer to the request body `sent` (None: read the message as it is)."""
    if error.upstream_status < 400:
        return None
    message = error.message[:MAX_MESSAGE].lower()
    if not (_PARSE_FAILURE.search(message) or _UNSUPPORTED.search(message)):
        return None
    if sent is not None:
        own = without_echoes(message, sent)
        if own is None:
            return None
        message = own
    if _PARSE_FAILURE.search(message):
        return "upstream_parse_failure"
    if _UNSUPPORTED.search(message):
        return "tools_unsupported"
    return None


def without_echoes(message: str, sent: Any) -> str | None:
    """`message` (lower case) with every string of `sent` found in it replaced by NUL (so the pieces around
    it do not join); None when `sent` holds too many strings to check. Linear: a string is compared only when
    its first MIN_ECHO characters occur in the message."""
    grams = {message[i:i + MIN_ECHO] for i in range(len(message) - MIN_ECHO + 1)}
    found: set[str] = set()
    for count, text in enumerate(_strings(sent)):
        if count >= MAX_STRINGS:
            return None
        if len(text) < MIN_ECHO:
            continue
        for form in _forms(text.lower()):
            if form[:MIN_ECHO] in grams and form in message:
                found.add(form)
    for text in sorted(found, key=len, reverse=True):
        message = message.replace(text, "\0")
    return message


def _forms(text: str) -> tuple[str, ...]:
    """The text as decoded, and as a JSON string's inside (a server may quote the raw body)."""
    escaped = orjson.dumps(text).decode()[1:-1]
    return (text,) if escaped == text else (text, escaped)


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value that the client may have written: values but the protocol's own, keys but
    plain words (no recursion: the value may be deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if item not in _PROTOCOL_VALUES:
                yield item
        elif isinstance(item, dict):
            yield from (k for k in item if isinstance(k, str) and not _WORD_KEY.fullmatch(k))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
