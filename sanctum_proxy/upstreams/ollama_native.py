"""A round's chat-completions body as Ollama's own `POST /api/chat` request. Pure.

A required call goes as a `format` schema: Ollama has no tool_choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from sanctum_proxy.core import decoded_json, lenient_json
from sanctum_proxy.core.shapes import OLLAMA_FIELDS, JSONObject, JSONValue
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.toolbox import Toolbox

# chat body field -> Ollama option; max_completion_tokens is read before max_tokens
SAMPLING = (("temperature", "temperature"), ("top_p", "top_p"), ("max_completion_tokens", "num_predict"),
            ("max_tokens", "num_predict"), ("seed", "seed"), ("frequency_penalty", "frequency_penalty"),
            ("presence_penalty", "presence_penalty"), ("top_k", "top_k"), ("min_p", "min_p"),
            ("repeat_penalty", "repeat_penalty"))
# reasoning_effort -> think, as Ollama's /v1 maps it
EFFORT = {"none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high", "max": "max",
          "xhigh": "max", "ultra": "max"}
IMAGE_PREFIXES = ("data:;base64,", "data:image/jpeg;base64,", "data:image/jpg;base64,", "data:image/png;base64,",
                  "data:image/webp;base64,", "data:image/gif;base64,")


@dataclass(frozen=True)
class NativeRequest:
    """And whether its content is a call to decode."""

    body: JSONObject
    calls_in_content: bool = False


def without_stash(body: JSONObject) -> JSONObject:
    """The body for a /v1 upstream, without the native client's fields."""
    return {k: v for k, v in body.items() if k != OLLAMA_FIELDS} if OLLAMA_FIELDS in body else body


def native_request(body: JSONObject) -> NativeRequest:
    stash = body.get(OLLAMA_FIELDS)
    own: Mapping[str, JSONValue] = stash if isinstance(stash, dict) else {}
    out: JSONObject = {"model": body.get("model"), "messages": messages(body.get("messages")),
                       "stream": body.get("stream") is True}
    if isinstance(body.get("tools"), list) and body["tools"] and body.get("tool_choice") != "none":
        out["tools"] = body["tools"]  # Ollama has no tool_choice: "none" is no tools
    fmt, calls_in_content = answer_format(body)
    if fmt is not None:
        out["format"] = fmt
    think = EFFORT.get(str(body.get("reasoning_effort")))
    if "reasoning_effort" in body and think is not None:
        out["think"] = think
    if body.get("logprobs") is True:
        out["logprobs"] = True
        if isinstance(body.get("top_logprobs"), int):
            out["top_logprobs"] = body["top_logprobs"]
    for key, value in own.items():
        if key == "options" or key == "format" and (calls_in_content or cn.is_constrained(body)):
            continue  # a constrained round's schema wins over the client's format
        if key not in ("model", "messages", "stream", "tools"):
            out[key] = value
    options = merged_options(sampling(body), own.get("options"))
    if options:
        out["options"] = options
    return NativeRequest(out, calls_in_content)


def sampling(body: JSONObject) -> JSONObject:
    """The Ollama options for the body's sampling fields; null is no value."""
    options: JSONObject = {}
    for field, option in SAMPLING:
        value = body.get(field)
        if value is not None and not isinstance(value, bool) and option not in options:
            options[option] = value
    stop = body.get("stop")
    if isinstance(stop, str):
        options["stop"] = [stop]
    elif isinstance(stop, list):
        options["stop"] = [s for s in stop if isinstance(s, str)]
    return options


def merged_options(mapped: JSONObject, own: JSONValue) -> JSONObject:
    """The client's native options as sent, then mapped ones it did not name."""
    if not isinstance(own, dict):
        return mapped
    return {**own, **{k: v for k, v in mapped.items() if k not in own}}


def answer_format(body: JSONObject) -> tuple[JSONValue, bool]:
    """`format`, and whether it stands for a required call."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return (schema if isinstance(schema, dict) else "json"), False
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return "json", False
    tools = body.get("tools")
    if body.get("tool_choice") == "required" and isinstance(tools, list) and tools:
        book = Toolbox.of(tools)
        if book.tools:
            parallel = body.get("parallel_tool_calls") is not False
            return cn.answer_schema(book, text=False, parallel=parallel), True
    return None, False


def messages(listed: JSONValue) -> list[JSONObject]:
    """The history in Ollama's shape; a tool result names its call's tool."""
    names: dict[str, str] = {}
    out: list[JSONObject] = []
    for message in listed if isinstance(listed, list) else ():
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(call, dict) and isinstance(call.get("id"), str) and isinstance(function, dict):
                names[call["id"]] = str(function.get("name") or "")
        out.append(native_message(message, names))
    return out


def native_message(message: JSONObject, names: Mapping[str, str]) -> JSONObject:
    role = message.get("role")
    role = "system" if role == "developer" else "tool" if role == "function" else role
    text, images = content_of(message.get("content"))
    out: JSONObject = {"role": role, "content": text}
    if images:
        out["images"] = images
    thought = message.get("reasoning_content") or message.get("reasoning")
    if role == "assistant" and isinstance(thought, str) and thought:
        out["thinking"] = thought
    calls = message.get("tool_calls")
    if role == "assistant" and isinstance(calls, list) and calls:
        out["tool_calls"] = [native_call(c) for c in calls if isinstance(c, dict)]
    if role == "tool":
        call_id = message.get("tool_call_id")
        name = message.get("name") or (names.get(call_id) if isinstance(call_id, str) else None)
        if isinstance(name, str) and name:
            out["tool_name"] = name
    return out


def content_of(content: JSONValue) -> tuple[str, list[str]]:
    """Text parts joined by newlines, and base64 image payloads."""
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    images: list[str] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type", "text") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str):
                images.append(image_data(url))
    return "\n".join(texts), images


def image_data(url: str) -> str:
    """A data URL's base64 payload; anything else as is (Ollama answers 400)."""
    for prefix in IMAGE_PREFIXES:
        if url.startswith(prefix):
            return url[len(prefix):]
    return url


def native_call(call: JSONObject) -> JSONObject:
    """A history call as Ollama holds it: name, arguments object, no id."""
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    return {"function": {"name": function.get("name") or "", "arguments": arguments_object(function.get("arguments"))}}


def arguments_object(arguments: JSONValue) -> JSONObject:
    """Arguments as an object, mended if broken; {} for a non-object."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        decoded = lenient_json.decode(arguments)
        value = decoded.value if isinstance(decoded, decoded_json.Decoded) else None
    return value if isinstance(value, dict) else {}


def native_options(body: JSONObject) -> JSONObject:
    stash = body.get(OLLAMA_FIELDS)
    own = stash.get("options") if isinstance(stash, dict) else None
    return merged_options(sampling(body), own)


def with_option(body: JSONObject, name: str, value: JSONValue) -> JSONObject:
    """The chat body with one native option set in its stash, in the client's position."""
    stash = body.get(OLLAMA_FIELDS)
    stash = dict(stash) if isinstance(stash, dict) else {}
    options = stash.get("options")
    stash["options"] = {**(options if isinstance(options, dict) else {}), name: value}
    return {**body, OLLAMA_FIELDS: stash}


