"""Which upstream errors mean "this server cannot do tools" (auto mode flips for good) or "it could not
parse its own model's call" (retry this request prompted; flip after a threshold), and the model's output an
error quotes whole (read for calls before asking again). An unrelated error never flips anything. Pure: read
from the error's status, message and body only.

The parse failures are every message the upstreams' own sources raise when their tool parser fails (table in
docs/contract.md section 4):

    llama.cpp (500 {"error": {"code": 500, "message", "type": "server_error"}}; in a stream `data: {"error"}`)
        common/chat.cpp             Failed to parse input at pos N: <the output from N on>
                                    The model produced output that does not match the expected <fmt> format
                                    Invalid diff: ... (compute_diffs / string_diff, streaming)
                                    Failed to parse tool call arguments as JSON: [json.exception...] (an earlier
                                    call in the history whose arguments are not JSON: workaround::func_args_not_string)
        common/chat-peg-parser.cpp  Duplicate tool argument: X / Missing required tool argument: X
    Ollama (500 {"error": "..."} on /api/chat; {"error": {"message", "type": "api_error", ...}} on /v1)
        harmony/harmonyparser.go    error parsing tool call: raw='<arguments>', err=<encoding/json error>
        model/parsers/qwen3.go      failed to parse JSON: <encoding/json error> / empty function name
        model/parsers/qwen3coder.go XML syntax error on line N: ... (encoding/xml, also qwen3.5)
        model/parsers/qwen3vl.go    <encoding/json error> bare: unexpected end of JSON input, invalid character ...
        model/parsers/glm46.go      incomplete GLM tool call: ... / failed to parse XML: ... / tool "x" is not
                                    declared / required argument "x" is missing for tool "y" / mismatched arg_key
                                    and arg_value counts / empty argument name
        model/parsers/laguna.go     failed to parse Laguna JSON tool call[ arguments]: ... / empty Laguna tool call name
        llm/llama_server.go         llama-server returned invalid tool call arguments for "X": ... / llama-server
                                    chat error: <one of llama.cpp's above>
    vLLM (its tool parsers return unparsed output as content, read by the codecs; gpt-oss's harmony parser raises)
        openai_harmony              unexpected tokens remaining in message header: ... / Unexpected token N while
                                    expecting start token 200006

Only the upstream's own words count: a server that quotes the request in its errors (a validation message
that echoes a field) must not let one client flip a model to prompted for every client by writing "does not
support tools" in a message. Every string the request sent holds (4 characters or more, as decoded and as
JSON-escaped) is cut out of the message before it is read, so a phrase made of the client's text, whole or
pieced together from several fields, never matches. Kept: keys that are plain words (`tools`, `tool_choice`)
and the chat protocol's own values (`user`, `function`, `auto`): none of them makes a phrase alone. A quote
(`quoted_output`) is read only after `classify` found the failure in the upstream's own words.
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
# Messages only a tool-call parser writes (the module docstring names their sources).
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
# Messages that are a parser's only when a 500 answers a tools request with nothing else said: Go's encoding/json
# errors that Ollama's qwen3-vl parser returns bare, and its GLM / Qwen3 parsers' short validation errors.
_BARE_PARSE_FAILURE = re.compile(
    r"(unexpected end of JSON input|invalid character '.{1,4}' (looking for beginning of (value|object key string)"
    r"|after object key(:value pair)?|after array element|in string literal|in string escape code"
    r"|after top-level value|in literal \w+ \(expecting '.'\))|empty function name|empty argument name"
    r"|tool \".{1,200}\" is not declared)",
    re.IGNORECASE,
)

# Ollama's /v1 stream once it has begun (server/routes.go streamResponse, middleware/openai.go ChatWriter): an error
# then (its tool parser's, or llama-server's in native mode) is JSON-encoded into the chat writer, read back as an
# empty chat response and sent as a chunk with model "" and delta {"content": ""}; the body then ends cleanly, with
# no finish chunk and no [DONE]. Its message is lost. In a round with tools the parser is what fails mid-stream (it
# holds a call back until the call is whole), so such an end is read as the parse failure it most likely was.
OLLAMA_LOST_ERROR = ("Ollama ended its stream after an error it did not show (its /v1 stream loses a mid-stream "
                     "error; with tools, its tool call parser failed)")


def ollama_lost_error(chunk: Any) -> bool:
    """Whether `chunk`, the last of a stream that ended without a finish_reason, is Ollama's echo of an error
    (above). Its own chunks always name the model."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    return (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
            and chunk.get("system_fingerprint") == "fp_ollama" and chunk.get("model") == ""
            and choices[0].get("delta") == {"content": ""} and choices[0].get("finish_reason") is None)


# The upstream refused the request as longer than its context: llama.cpp (400, type exceed_context_size_error,
# "request (N tokens) exceeds the available context size (M tokens), try increasing it", tools/server/
# server-context.cpp), vLLM ("This model's maximum context length is N tokens. However, your request has ...",
# serving_engine.py), Ollama ("the input length exceeds the context length", when it does not truncate).
_CONTEXT_EXCEEDED = re.compile(
    r"exceeds the available context size|maximum context length is \d+|input length exceeds the context length",
    re.IGNORECASE,
)


def context_exceeded(error: UpstreamError, sent: Any = None) -> bool:
    """Whether `error` says the request `sent` did not fit the model's context (in the upstream's own words: a
    phrase made of the request's strings does not count)."""
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


# llama.cpp quotes the output from the failing position on: from position 0 that is the whole output.
_QUOTED_FROM_START = re.compile(r"Failed to parse input at pos 0: (.*)\Z", re.DOTALL)

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
    if error.message == OLLAMA_LOST_ERROR:  # the proxy's own words for what Ollama did not say
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


def _quotes_the_client(message: str, sent: Any) -> bool:
    """Whether a telling phrase left in `message` is written in one of the request's strings: an upstream that
    quotes only the start of a long string (or a piece of it) leaves it whole where `without_echoes` finds
    no whole string to cut."""
    phrases = [m.group().strip() for pattern in (_UNSUPPORTED, _PARSE_FAILURE) for m in pattern.finditer(message)]
    if not phrases:
        return False
    texts = [text.lower() for count, text in zip(range(MAX_STRINGS), _strings(sent), strict=False)]
    return any(phrase in text for phrase in phrases for text in texts if len(text) >= len(phrase))


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


def quoted_output(error: UpstreamError) -> str | None:
    """The model's whole output as a parse failure quotes it (llama.cpp's `Failed to parse input at pos 0: ...`,
    also inside Ollama's `llama-server chat error: ...`), or None: no quote, a quote from a later position (the
    start of the output is missing), or a message that did not come whole in a JSON error body (a body the
    upstream cut or that is not JSON: its end may be missing)."""
    if not _whole_json_message(error.raw, error.message):
        return None
    match = _QUOTED_FROM_START.search(error.message)
    return match.group(1) if match and match.group(1).strip() else None


# Ollama's harmony parser quotes the call's arguments (not its name) whole: `raw='<arguments>', err=<error>`.
_QUOTED_ARGUMENTS = re.compile(r"error parsing tool call: raw='(.*)', err=", re.DOTALL)  # greedy: the last err=


def quoted_arguments(error: UpstreamError) -> str | None:
    """The arguments of the one call Ollama's gpt-oss (harmony) parser could not decode, as its error quotes
    them whole (harmony/harmonyparser.go), or None."""
    if not _whole_json_message(error.raw, error.message):
        return None
    match = _QUOTED_ARGUMENTS.search(error.message)
    return match.group(1) if match and match.group(1).strip() else None


def _whole_json_message(raw: Any, message: str) -> bool:
    """The message is a string field of the parsed error body (llama.cpp's and /v1's `error.message`, Ollama's
    `error`), as it came."""
    if not isinstance(raw, dict):
        return False
    err = raw.get("error")
    return (isinstance(err, dict) and err.get("message") == message) or err == message
