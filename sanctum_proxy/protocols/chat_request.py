"""The OpenAI chat request as the proxy reads it: validation, the `sanctum` controls, and the tools offered.

Unknown fields are kept: `ChatRequest.body` is the client's body minus the `sanctum` object, forwarded as is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
from jsonschema import exceptions as schema_errors

from sanctum_proxy.config import Settings
from sanctum_proxy.core.shapes import JSONObject, JSONValue
from sanctum_proxy.errors import ArrayTooLong, InvalidRequest, shown
from sanctum_proxy.repair import schemas

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_CALLING = ("native", "prompted", "auto")
OMEN_STYLES = ("comments", "events")
CONSTRAIN = ("off", "repair", "always")
SURRENDER = ("error", "content", "last_call")
# Longer model names are refused, since the proxy keeps each name it serves; real ones are well under this.
MAX_MODEL_CHARS = 256


def check_counts(body: JSONObject, max_messages: int, max_tools: int) -> None:
    """Too many messages or tools is a 400 naming the field, code `array_above_max_length`, as OpenAI answers."""
    for field, limit in (("messages", max_messages), ("tools", max_tools), ("functions", max_tools)):
        items = body.get(field)
        if isinstance(items, list) and len(items) > limit:
            raise ArrayTooLong(f"'{field}': array too long. Expected an array with maximum length {limit}, "
                               f"but got an array with length {len(items)} instead.", param=field)


@dataclass(frozen=True)
class Controls:
    """Per-request settings: header X-Sanctum-* or body `sanctum.*`, else the proxy's settings."""

    spell_calling: str
    max_repair_rounds: int
    omens: str = "comments"
    constrain: str | None = None
    on_surrender: str = "error"


@dataclass(frozen=True)
class ChatRequest:
    body: JSONObject  # without `sanctum`
    controls: Controls

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def model(self) -> str:
        model = self.body.get("model")
        return model if isinstance(model, str) else ""

    @property
    def tools(self) -> list[JSONObject]:
        tools = self.body.get("tools")
        return tools if isinstance(tools, list) else []

    @property
    def functions(self) -> list[JSONObject]:
        functions = self.body.get("functions")
        return functions if isinstance(functions, list) else []

    def with_body(self, body: JSONObject) -> ChatRequest:
        return replace(self, body=body)


def json_object(raw: bytes) -> JSONObject:
    """A request body that must be one JSON object (400 otherwise)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    return body


def chat_request(body: JSONObject, headers: Mapping[str, str], settings: Settings, *,
                 on_surrender: str | None = None, tools_checked: bool = False) -> ChatRequest:
    """A chat body, read or translated, checked with its `sanctum` taken out; `on_surrender` None means the setting's,
    `tools_checked` that this tool list passed `check_tools` before."""
    check_counts(body, settings.max_messages, settings.max_tools)
    check_model(body.get("model"))
    check_depth(body)
    check_messages(body.get("messages"))
    if not tools_checked:
        check_tools(body)
    check_choices(body)
    sanctum = body.pop("sanctum", None)
    return ChatRequest(body=body, controls=parse_controls(headers, sanctum, settings, on_surrender))


def check_model(model: JSONValue) -> None:
    if isinstance(model, str) and len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(f"'model' is {len(model)} characters long; model names of at most {MAX_MODEL_CHARS} "
                             "characters are served", param="model")


# orjson reads 1024 levels but writes 254; the proxy writes a request again a few levels deeper, so leave this room.
DEPTH_HEADROOM = 16


def check_depth(body: JSONObject) -> None:
    """A field nested too deep to be written back is a 400 naming it; orjson tries the whole body first, at C speed."""
    whole: object = body
    for _ in range(DEPTH_HEADROOM - 1):
        whole = [whole]
    try:
        orjson.dumps(whole)
        return
    except orjson.JSONEncodeError:
        pass
    for key, value in body.items():
        for _ in range(DEPTH_HEADROOM):
            value = [value]
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise InvalidRequest(f"'{key}' is nested too deeply (JSON more than about "
                                 f"{254 - DEPTH_HEADROOM} levels deep is refused)", param=key) from exc


def check_choices(body: JSONObject) -> None:
    """`tool_choice` and `stream_options` are read by the proxy, so their shape must be OpenAI's."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and "function" in choice:
        function = choice["function"]
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest("tool_choice.function must be an object with a string name",
                                 param="tool_choice")
    elif choice is not None and not isinstance(choice, str | dict):
        raise InvalidRequest("tool_choice must be 'none', 'auto', 'required' or an object naming a function",
                             param="tool_choice")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest(f"stream_options must be an object, got {type(options).__name__}",
                             param="stream_options")
    legacy = body.get("function_call")
    if legacy is not None and not isinstance(legacy, str | dict):
        raise InvalidRequest("function_call must be 'none', 'auto' or an object with a name",
                             param="function_call")


def check_messages(messages: JSONValue) -> None:
    if messages is None:
        raise InvalidRequest("'messages' is a required property", param="messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidRequest(f"messages[{i}].role must be a non-empty string", param=f"messages[{i}].role")
        check_history_calls(message, f"messages[{i}]")


def check_history_calls(message: JSONObject, where: str) -> None:
    """Earlier calls are read back (prompted mode rewrites them as text), so their shape must be OpenAI's."""
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise InvalidRequest(f"{where}.tool_calls must be an array", param=f"{where}.tool_calls")
    for j, call in enumerate(calls or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest(f"{where}.tool_calls[{j}] must be an object with a function "
                                 "{name, arguments}", param=f"{where}.tool_calls")
    legacy = message.get("function_call")
    if legacy is not None and not (isinstance(legacy, dict) and isinstance(legacy.get("name"), str)):
        raise InvalidRequest(f"{where}.function_call must be an object with a name",
                             param=f"{where}.function_call")


def check_tools(body: JSONObject) -> None:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    functions = body.get("functions")
    if functions is not None and not isinstance(functions, list):
        raise InvalidRequest("'functions' must be an array", param="functions")
    seen: set[str] = set()
    patterns = [0, 0]  # every tool's so far: patterns (up to MAX_PATTERNS), RE2 instructions
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise InvalidRequest(f"tools[{i}] must be an object with type 'function'", param="tools")
        check_function(tool.get("function"), f"tools[{i}].function", "tools", seen, patterns)
    for i, function in enumerate(functions or []):
        check_function(function, f"functions[{i}]", "functions", seen, patterns)


def check_function(function: JSONValue, where: str, param: str, seen: set[str],
                   patterns: list[int] | None = None) -> None:
    if not isinstance(function, dict):
        raise InvalidRequest(f"{where} must be an object", param=param)
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):  # not match: $ matches before a last \n
        raise InvalidRequest(f"{where}.name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {shown(name)}", param=param)
    if name in seen:
        raise InvalidRequest(f"duplicate tool name {shown(name)}: each tool needs a unique name", param=param)
    seen.add(name)
    schema = function.get("parameters")
    if schema is None:
        return
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise InvalidRequest(f"{where}.parameters must be a JSON Schema object with type 'object'", param=param)
    serialized = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    if patterns is not None and b'"pattern' in serialized:
        patterns[0] += (schema_patterns(serialized) if len(serialized) <= CACHED_SCHEMA_BYTES
                        else schemas.pattern_count(orjson.loads(serialized)))
        if patterns[0] > schemas.MAX_PATTERNS:
            raise InvalidRequest(f"the tools hold more than {schemas.MAX_PATTERNS} patterns in all (pattern and "
                                 "patternProperties): each is compiled when the request is read", param=param)
        left = schemas.MAX_REQUEST_PROGRAM - patterns[1]
        patterns[1] += schemas.program_size(orjson.loads(serialized), left)
        if patterns[1] > schemas.MAX_REQUEST_PROGRAM:
            raise InvalidRequest(f"the tools' patterns compile to more than {schemas.MAX_REQUEST_PROGRAM} RE2 "
                                 "instructions in all (the proxy's budget per request): use fewer or simpler "
                                 "patterns", param=param)
    problem = schema_problem(serialized) if len(serialized) <= CACHED_SCHEMA_BYTES else \
        _schema_problem(serialized)
    if problem is not None:
        raise InvalidRequest(f"{where}.parameters is not a valid JSON Schema: {problem}", param=param)


CACHED_SCHEMA_BYTES = 64 * 1024


def _schema_problem(serialized: bytes) -> str | None:
    """Why a tool's `parameters` is no valid JSON Schema or one the proxy refuses (an outside `$ref`, a non-RE2
    pattern)."""
    schema = orjson.loads(serialized)
    refused = schemas.refusal(schema)
    if refused is not None:
        return refused
    try:
        schemas.check_schema(schema)
    except schema_errors.SchemaError as exc:
        return str(exc.message)
    return None


# Clients resend the same tools every request and a metaschema check is costly; bounded in entries and schema size.
schema_problem = functools.lru_cache(maxsize=512)(_schema_problem)


@functools.lru_cache(maxsize=512)
def schema_patterns(serialized: bytes) -> int:
    return schemas.pattern_count(orjson.loads(serialized))


def parse_controls(headers: Mapping[str, str], sanctum: JSONValue, settings: Settings,
                   on_surrender: str | None = None) -> Controls:
    if sanctum is not None and not isinstance(sanctum, dict):
        raise InvalidRequest("'sanctum' must be an object", param="sanctum")
    given = dict(sanctum or {})
    unknown = set(given) - {"spell_calling", "max_repair_rounds", "omens", "constrain", "on_surrender"}
    if unknown:
        raise InvalidRequest(f"unknown sanctum control(s): {sorted(unknown)}", param="sanctum")

    # One pass, since a header lookup walks every header and most requests have none of ours.
    ours = {k.lower(): v for k, v in headers.items() if k[:10].lower() == "x-sanctum-"}

    def pick(key: str, header: str) -> Any:
        value = ours.get(header)
        return value if value is not None else given.get(key)

    return Controls(
        spell_calling=_choice(pick("spell_calling", "x-sanctum-spell-calling"), TOOL_CALLING,
                              "spell_calling", settings.spell_calling),
        max_repair_rounds=_rounds(pick("max_repair_rounds", "x-sanctum-max-repair-rounds"),
                                  settings.max_repair_rounds),
        omens=_choice(pick("omens", "x-sanctum-omens"), OMEN_STYLES, "omens", "comments"),
        constrain=_choice(pick("constrain", "x-sanctum-constrain"), CONSTRAIN, "constrain", None),
        on_surrender=_choice(pick("on_surrender", "x-sanctum-on-surrender"), SURRENDER, "on_surrender",
                             on_surrender or settings.on_surrender),
    )


def _choice(value: JSONValue, allowed: tuple[str, ...], name: str, default: str | None) -> Any:
    if value is None:
        return default
    if value not in allowed:
        raise InvalidRequest(f"invalid sanctum control '{name}': {shown(value)} (allowed: {', '.join(allowed)})",
                             param=f"sanctum.{name}")
    return value


def _rounds(value: JSONValue, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():  # int() takes '²' too
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
        raise InvalidRequest(f"invalid sanctum control 'max_repair_rounds': {shown(value)} (an integer 0..10)",
                             param="sanctum.max_repair_rounds")
    return value
