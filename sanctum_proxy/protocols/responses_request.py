"""A Responses API request (POST /v1/responses) as a chat completions body.

Served, ignored and refused fields are listed in docs/contract.md. Namespace tools are offered flat as
`<namespace>__<name>`; hosted tools are withheld (a SpellsWithheld omen) and `custom` ones refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.openai_chat import FunctionTool, function_tool, tool_call
from sanctum_proxy.core.shapes import ChatMessage, ContentPart, JSONObject, JSONValue
from sanctum_proxy.core.tool_names import NAMESPACE_JOIN  # Codex's canonical flat name
from sanctum_proxy.errors import InvalidRequest
from sanctum_proxy.errors import shown as quoted
from sanctum_proxy.protocols.function_tools import unsupported
from sanctum_proxy.protocols.system_messages import merge_system_messages

STATEFUL = ("previous_response_id", "conversation", "background", "prompt")
# Non-Responses fields sent on: the chat sampling fields upstreams read; others (Codex's `client_metadata`) stay
# here.
FORWARDED = frozenset({"seed", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "top_k", "min_p",
                       "typical_p", "repeat_penalty", "repetition_penalty", "repeat_last_n", "min_tokens",
                       "chat_template_kwargs", "cache_prompt"})
CLIENT_RUN = frozenset({"custom"})  # free-form input has no chat form
MAX_TYPE_CHARS = 64  # clipped, as the omen shows it


@dataclass(frozen=True)
class Spells:
    """The request's `tools` as the model is offered them."""

    functions: list[FunctionTool] = field(default_factory=list)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat name -> (namespace, name)
    withheld: list[tuple[int, str]] = field(default_factory=list)  # (index, type) of each tool left out


def to_chat(body: JSONObject) -> JSONObject:
    """The chat-completions body for a Responses request (InvalidRequest naming the field it cannot serve)."""
    for name in STATEFUL:
        if body.get(name) not in (None, False):
            raise InvalidRequest(f"'{name}' is not supported: sanctum-proxy keeps no responses or conversations; "
                                 "send the whole conversation in 'input'", param=name)
    chat: JSONObject = {k: v for k, v in body.items() if k in FORWARDED}
    chat["model"] = body.get("model")
    messages = _instructions(body.get("instructions")) + input_messages(body.get("input"))
    chat["messages"] = merge_system_messages(messages)
    spells = read_tools(body.get("tools"))
    tools = spells.functions
    choice = body.get("tool_choice")
    _check_forced(choice)
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = _allowed(choice.get("tools"), spells)
        tools = [t for t in tools if t["function"]["name"] in allowed]
        choice = choice.get("mode", "auto")
    if tools:
        chat["tools"] = tools
    elif spells.withheld:  # every tool was left out
        if choice == "required":
            raise InvalidRequest("'tool_choice' is 'required' but every tool offered is one sanctum-proxy cannot "
                                 f"run ({_kinds(spells.withheld)})", param="tool_choice")
        choice = None
    if choice is not None:
        chat["tool_choice"] = _tool_choice(choice)
    _copy(body, chat, ("temperature", "top_p", "stream", "sanctum"))
    if tools or not spells.withheld:
        _copy(body, chat, ("parallel_tool_calls",))
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    if wants_logprobs(body):
        chat["logprobs"] = True
        if isinstance(body.get("top_logprobs"), int):
            chat["top_logprobs"] = body["top_logprobs"]
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is not None:
        chat["reasoning_effort"] = effort
    return chat


LOGPROBS_INCLUDE = "message.output_text.logprobs"


def wants_logprobs(body: JSONObject) -> bool:
    """Whether `include` asks for the output text's logprobs."""
    include = body.get("include")
    return isinstance(include, list) and LOGPROBS_INCLUDE in include


def _copy(source: JSONObject, target: JSONObject, keys: tuple[str, ...]) -> None:
    for key in keys:
        if source.get(key) is not None:
            target[key] = source[key]


def _instructions(instructions: JSONValue) -> list[ChatMessage]:
    if instructions is None or instructions == "":
        return []
    if isinstance(instructions, str):
        return [{"role": "system", "content": instructions}]
    if isinstance(instructions, list):  # input items, as the API allows
        return input_messages(instructions, "instructions")
    raise InvalidRequest("'instructions' must be a string", param="instructions")


def input_messages(items: JSONValue, where: str = "input") -> list[ChatMessage]:
    """Input items as chat messages: function calls join one assistant message, each output a `tool` message."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise InvalidRequest(f"'{where}' must be a string or an array of input items", param=where)
    messages: list[ChatMessage] = []
    images: list[ContentPart] = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{at} must be an object", param=at)
        kind = item.get("type", "message")
        if kind != "function_call_output" and images:
            messages.append({"role": "user", "content": images})
            images = []
        if kind == "message":
            messages.append(_message(item, at))
        elif kind == "function_call":
            _add_call(messages, item, at)
        elif kind == "function_call_output":
            output, shown = _call_output(item, at)
            messages.append(output)
            images += shown
        elif kind == "reasoning":
            continue  # chat upstreams take no reasoning back
        elif kind == "item_reference":
            raise InvalidRequest(f"{at}: 'item_reference' items are not supported: sanctum-proxy keeps no items; "
                                 "send the item itself", param=at)
        else:
            raise InvalidRequest(f"{at}: input items of type {quoted(kind)} are not supported (only message, "
                                 "function_call, function_call_output and reasoning)", param=f"{at}.type")
    if images:
        messages.append({"role": "user", "content": images})
    return messages


def _message(item: JSONObject, at: str) -> ChatMessage:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise InvalidRequest(f"{at}.role must be one of user, assistant, system, developer; got {quoted(role)}",
                             param=f"{at}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise InvalidRequest(f"{at}.content must be a string or an array of content parts", param=f"{at}.content")
    parts = [_part(part, f"{at}.content[{j}]") for j, part in enumerate(content)]
    if role != "user" or all(p["type"] == "text" for p in parts):  # text alone reads best as a string
        return {"role": role, "content": "".join(p.get("text", "") for p in parts)}
    return {"role": role, "content": parts}


def _part(part: JSONValue, at: str) -> ContentPart:
    if not isinstance(part, dict):
        raise InvalidRequest(f"{at} must be an object", param=at)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "refusal":
        return {"type": "text", "text": str(part.get("refusal") or "")}
    if kind == "input_image":
        if not isinstance(part.get("image_url"), str):
            raise InvalidRequest(f"{at}: only input_image parts with an 'image_url' (a URL or a data URL) are "
                                 "supported; sanctum-proxy keeps no files", param=f"{at}.image_url")
        image = {"url": part["image_url"]}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise InvalidRequest(f"{at}: content parts of type {quoted(kind)} are not supported (input_text, output_text, "
                         "refusal, input_image)", param=f"{at}.type")


def _add_call(messages: list[ChatMessage], item: JSONObject, at: str) -> None:
    name, call_id, namespace = item.get("name"), item.get("call_id"), item.get("namespace")
    if not isinstance(name, str) or not isinstance(call_id, str):
        raise InvalidRequest(f"{at}: a function_call item needs a string 'name' and 'call_id'", param=at)
    if isinstance(namespace, str) and namespace:  # the name it was offered as
        name = flat_name(namespace, name)
    arguments = item.get("arguments")
    call = tool_call(call_id, name, arguments if isinstance(arguments, str) else
                     orjson.dumps(arguments if arguments is not None else {}).decode())
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and isinstance(last.get("content"), (str, type(None))):
        cast(list[JSONValue], last.setdefault("tool_calls", [])).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: JSONObject, at: str) -> tuple[ChatMessage, list[ContentPart]]:
    """The `tool` message, and the output's images (a chat `tool` message takes text only)."""
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str):
        raise InvalidRequest(f"{at}: a function_call_output item needs a string 'call_id'", param=f"{at}.call_id")
    images: list[ContentPart] = []
    if isinstance(output, list):
        parts = [_part(p, f"{at}.output[{j}]") for j, p in enumerate(output)]
        output = "".join(p["text"] for p in parts if p["type"] == "text")
        images = [p for p in parts if p["type"] != "text"]
    elif not isinstance(output, str):
        output = orjson.dumps(output).decode()
    return {"role": "tool", "tool_call_id": call_id, "content": output}, images


def flat_name(namespace: str, name: str) -> str:
    """The name a namespaced function is offered under (`multi_agent_v1__spawn_agent`)."""
    return namespace.rstrip("_") + NAMESPACE_JOIN + name.lstrip("_")


def read_tools(tools: JSONValue) -> Spells:
    """The chat functions of `tools`: namespaces' functions under flat names, non-function types withheld, `custom` a
    400."""
    if tools is None:
        return Spells()
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    spells = Spells()
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            spells.functions.append(function_tool(_function(tool, f"tools[{i}]")))
        elif kind == "namespace":
            _add_namespace(spells, tool, i)
        elif isinstance(kind, str) and kind not in CLIENT_RUN:
            spells.withheld.append((i, kind))
        else:
            raise unsupported(i, tool, "function and namespace tools (hosted tools are left out of what the model "
                                       "is offered)")
    counts = Counter(t["function"].get("name") for t in spells.functions)
    twice = sorted(n for n, k in counts.items() if k > 1 and isinstance(n, str))
    if twice:
        raise InvalidRequest(f"'tools': the name {quoted(twice[0])} is offered twice (namespaced functions are "
                             "offered as '<namespace>__<name>')", param="tools")
    return spells


def _add_namespace(spells: Spells, tool: JSONObject, i: int) -> None:
    namespace, members = tool.get("name"), tool.get("tools")
    if not isinstance(namespace, str) or not namespace or not isinstance(members, list):
        raise InvalidRequest(f"tools[{i}]: a namespace tool needs a string 'name' and a 'tools' array",
                             param=f"tools[{i}]")
    for j, member in enumerate(members):
        at = f"tools[{i}].tools[{j}]"
        if not isinstance(member, dict) or member.get("type") != "function":
            kind = member.get("type") if isinstance(member, dict) else None
            raise InvalidRequest(f"{at}: tools of type {quoted(kind)} are not supported in a namespace: "
                                 "sanctum-proxy serves function tools there", param=f"{at}.type")
        function = _function(member, at)
        name = function.get("name")
        if isinstance(name, str):
            flat = function["name"] = flat_name(namespace, name)
            spells.namespaced[flat] = (namespace, name)
        spells.functions.append(function_tool(function))


def _function(tool: JSONObject, at: str) -> JSONObject:
    if not isinstance(tool.get("name"), str):
        raise InvalidRequest(f"{at}: a function tool needs a string 'name'", param=f"{at}.name")
    return {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}


def _kinds(withheld: list[tuple[int, str]]) -> str:
    return ", ".join(dict.fromkeys(kind for _, kind in withheld))


def withheld_omens(body: JSONObject) -> list[om.Omen]:
    """The SpellsWithheld omen of a request whose tools were partly left out."""
    withheld = read_tools(body.get("tools")).withheld
    if not withheld:
        return []
    return [om.withheld(0, [{"index": i, "type": kind[:MAX_TYPE_CHARS]} for i, kind in withheld],
                        "hosted tools run on OpenAI's servers; sanctum-proxy cannot run them, so the model is not "
                        "offered them")]


def namespaced_names(body: JSONObject) -> dict[str, tuple[str, str]]:
    """Flat name -> (namespace, name) of the request's namespaced functions."""
    return read_tools(body.get("tools")).namespaced


def _check_forced(choice: JSONValue) -> None:
    """A tool_choice forcing a non-function tool is a 400: the model could never make that call here."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    if isinstance(kind, str) and kind not in ("function", "allowed_tools"):
        raise InvalidRequest(f"'tool_choice' forces a tool of type {quoted(kind)}, which sanctum-proxy cannot run: it "
                             "serves function tools (hosted tools are left out of what the model is offered)",
                             param="tool_choice")


def _allowed(tools: JSONValue, spells: Spells) -> set[str]:
    """The flat names an allowed_tools choice lists (a namespace: all its functions)."""
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") == "function":
            namespace = tool.get("namespace")
            names.add(flat_name(namespace, tool["name"]) if isinstance(namespace, str) else tool["name"])
        elif tool.get("type") == "namespace":
            names |= {flat for flat, (namespace, _) in spells.namespaced.items() if namespace == tool["name"]}
    return names


def _tool_choice(choice: JSONValue) -> Any:
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        namespace = choice.get("namespace")
        name = flat_name(namespace, choice["name"]) if isinstance(namespace, str) else choice["name"]
        return {"type": "function", "function": {"name": name}}
    raise InvalidRequest(f"'tool_choice' {quoted(choice)} is not supported (none, auto, required, "
                         "{\"type\": \"function\", \"name\": ...} or allowed_tools)", param="tool_choice")


def _response_format(text: JSONValue) -> JSONObject | None:
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict) or form.get("type") in (None, "text"):
        return None
    if form.get("type") == "json_schema":
        schema = {k: form[k] for k in ("name", "schema", "strict", "description") if k in form}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": form["type"]}
