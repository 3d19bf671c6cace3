"""Classify upstream errors: tools unsupported, own tool parser failed, or unrelated (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

import orjson

from sanctum_proxy.errors import UpstreamError

Verdict = Literal["tools_unsupported", "upstream_parse_failure"]

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
# Sources: docs/contract.md section 4.
_PARSE_FAILURE = re.compile(
    r"does not match the expected .{0,40}format|failed to parse input at pos|invalid diff"
    r"|failed to parse tool call arguments as json|duplicate tool argument: |missing required tool argument: "
    r"|error parsing tool call|failed to parse json: |xml syntax error on line|failed to parse xml: "
    r"|incomplete glm tool call|mismatched arg_key and arg_value counts|required argument \".{0,200}\" is missing for"
    r" tool|failed to parse laguna json tool call|empty laguna tool call name"
    r"|llama-server returned invalid tool call arguments"
    r"|unexpected tokens remaining in message header|while expecting start token \d+",
    re.IGNORECASE,
)
# A parser's only as a bare 500.
_BARE_PARSE_FAILURE = re.compile(
    r"(unexpected end of JSON input|invalid character '.{1,4}' (looking for beginning of (value|object key string)"
    r"|after object key(:value pair)?|after array element|in string literal|in string escape code"
    r"|after top-level value|in literal \w+ \(expecting '.'\))|empty function name|empty argument name"
    r"|tool \".{1,200}\" is not declared)",
    re.IGNORECASE,
)

# Ollama's /v1 stream loses a mid-stream error; with tools it is read as a parse failure.
OLLAMA_LOST_ERROR = ("Ollama ended its stream after an error it did not show (its /v1 stream loses a mid-stream "
                     "error; with tools, its tool call parser failed)")


def ollama_lost_error(chunk: Any) -> bool:
    """Whether `chunk`, a stream's unfinished last, is Ollama's empty error echo."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    return (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
            and chunk.get("system_fingerprint") == "fp_ollama" and chunk.get("model") == ""
            and choices[0].get("delta") == {"content": ""} and choices[0].get("finish_reason") is None)


_CONTEXT_EXCEEDED = re.compile(
    r"exceeds the available context size|maximum context length is \d+|input length exceeds the context length",
    re.IGNORECASE,
)


def context_exceeded(error: UpstreamError, sent: Any = None) -> bool:
    """Whether `error` says, in its own words, that `sent` overflowed the context."""
    if error.upstream_status < 400:
        return False
    fields = error.extra()
    if fields.get("upstream_type") == "exceed_context_size_error":
        return True
    message = error.message[:MAX_MESSAGE].lower()
    if not _CONTEXT_EXCEEDED.search(message):
        return False
    own = without_echoes(message, sent) if sent is not None else message
    return own is not None and _CONTEXT_EXCEEDED.search(own) is not None


_QUOTED_FROM_START = re.compile(r"Failed to parse input at pos 0: (.*)\Z", re.DOTALL)

MAX_MESSAGE = 4000
MIN_ECHO = 4  # a model name "m" would cut every m
MAX_STRINGS = 100_000
_WORD_KEY = re.compile(r"[a-z_]+")
_PROTOCOL_VALUES = frozenset({
    "user", "assistant", "system", "developer", "tool", "function", "auto", "none", "required", "object",
    "string", "number", "integer", "boolean", "array", "null", "text", "image_url", "json_object", "json_schema",
})


def classify(error: UpstreamError, sent: Any = None) -> Verdict | None:
    """The verdict on `error`, an answer to the request body `sent`."""
    if error.upstream_status < 400:
        return None
    if error.message == OLLAMA_LOST_ERROR:
        return "upstream_parse_failure"
    message = error.message[:MAX_MESSAGE].lower()
    bare = error.upstream_status >= 500 and _BARE_PARSE_FAILURE.fullmatch(message.strip()) is not None
    if not (bare or _PARSE_FAILURE.search(message) or _UNSUPPORTED.search(message)):
        return None
    if sent is not None:
        own = without_echoes(message, sent)
        if own is None or _quotes_the_client(own, sent):
            return None
        message = own
    if _PARSE_FAILURE.search(message):
        return "upstream_parse_failure"
    if error.upstream_status >= 500 and _BARE_PARSE_FAILURE.fullmatch(message.strip()):
        return "upstream_parse_failure"
    if _UNSUPPORTED.search(message):
        return "tools_unsupported"
    return None


def without_echoes(message: str, sent: Any) -> str | None:
    """`message` with `sent`'s strings cut to NUL; None when there are too many."""
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


def _quotes_the_client(message: str, sent: Any) -> bool:
    """Whether a telling phrase left in `message` is part of a request string."""
    phrases = [m.group().strip() for pattern in (_UNSUPPORTED, _PARSE_FAILURE) for m in pattern.finditer(message)]
    if not phrases:
        return False
    texts = [text.lower() for count, text in zip(range(MAX_STRINGS), _strings(sent), strict=False)]
    return any(phrase in text for phrase in phrases for text in texts if len(text) >= len(phrase))


def _forms(text: str) -> tuple[str, ...]:
    """The text as decoded and JSON-escaped."""
    escaped = orjson.dumps(text).decode()[1:-1]
    return (text,) if escaped == text else (text, escaped)


def _strings(value: Any) -> Iterator[str]:
    """The client's strings in a JSON value, iteratively (it may be deep)."""
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


def quoted_output(error: UpstreamError) -> str | None:
    """The model's whole output as a parse failure at pos 0 quotes it, or None."""
    if not _whole_json_message(error.raw, error.message):
        return None
    match = _QUOTED_FROM_START.search(error.message)
    return match.group(1) if match and match.group(1).strip() else None


_QUOTED_ARGUMENTS = re.compile(r"error parsing tool call: raw='(.*)', err=", re.DOTALL)


def quoted_arguments(error: UpstreamError) -> str | None:
    """The arguments Ollama's harmony parser quotes as undecodable, or None."""
    if not _whole_json_message(error.raw, error.message):
        return None
    match = _QUOTED_ARGUMENTS.search(error.message)
    return match.group(1) if match and match.group(1).strip() else None


def _whole_json_message(raw: Any, message: str) -> bool:
    """Whether the message came whole in a JSON error body."""
    if not isinstance(raw, dict):
        return False
    err = raw.get("error")
    return (isinstance(err, dict) and err.get("message") == message) or err == message
