"""The call format each model family was trained on: how to tell it from a chat template, and how its calls
and tool results are written, for prompted mode (the tools prompt, earlier calls and results in the history)
and for quoting a rejected call back to the model.

    detect(template, family)   the family a chat template (llama.cpp /props, Ollama /api/show) is for
    render_call(fmt, name, a)  one call as that family writes it (a: dict, or a JSON string kept verbatim)
    render_result(fmt, ...)    one tool result as that family reads it

Pure: no I/O. Every format here is read back by the codec named in README's format table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

import orjson

# The values of `prompt_format` / `[prompt_formats]`; "auto" picks by `detect` (else Hermes).
PromptFormat = Literal["auto", "hermes", "json", "qwen_xml", "glm", "seed", "harmony", "kimi", "deepseek",
                       "deepseek_v31", "command_r", "functionary", "functionary_v31", "mistral", "llama3",
                       "pythonic"]
FORMATS: tuple[str, ...] = get_args(PromptFormat)
FAMILIES = FORMATS[1:]
FALLBACK = "hermes"
# The codec that reads a format back, where its name differs (a call in the asked-for format is no mend).
_READ_BY = {"deepseek_v31": "deepseek", "functionary_v31": "qwen_xml", "llama3": "json"}


def codec_of(fmt: str) -> str:
    """The codec (`Candidate.source`) that reads calls written in prompt format `fmt`."""
    return _READ_BY.get(fmt, fmt)

# Template markers, most specific first (a Qwen3-Coder template also holds <tool_call>, a GLM one too).
_MARKERS: tuple[tuple[str, str], ...] = (
    ("<|channel|>", "harmony"),
    ("<|tool_calls_section_begin|>", "kimi"),
    ("<|tool_call_begin|>", "kimi"),
    ("<|START_ACTION|>", "command_r"),
    ("<seed:tool_call>", "seed"),
    ("<arg_key>", "glm"),
    ("<｜tool▁sep｜>", "deepseek"),
    (">>>", "functionary"),
    ("<parameter=", "qwen_xml"),
    ("<function=", "functionary_v31"),  # JSON inside <function=NAME>...</function> (its template also has python_tag)
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3"),
    ("<|start_header_id|>ipython", "llama3"),
    ("<|tool_call_start|>", "pythonic"),
    ("<tool_call>", "hermes"),
)
_OLLAMA_FAMILIES = {"gptoss": "harmony", "gpt-oss": "harmony", "glm4moe": "glm", "seed_oss": "seed"}


def detect(template: Any, family: Any = None) -> str | None:
    """The family whose call markup the chat template writes; Ollama's `details.family` when the template
    says nothing; None when neither is known (the caller falls back to Hermes)."""
    text = template if isinstance(template, str) else ""
    for marker, name in _MARKERS:
        if marker in text:
            if name == "deepseek" and "```json" not in text:
                return "deepseek_v31"  # V3.1+ writes the arguments bare after the separator
            return name
    return _OLLAMA_FAMILIES.get(family.lower()) if isinstance(family, str) else None


def opens_bare(fmt: str) -> bool:
    """Whether the family's generation prompt already holds the first call marker, so an answer opens with
    a bare `NAME\n{...}` or `all\n` (Functionary v3.2's prompt ends with `>>>`)."""
    return fmt == "functionary"


def arguments_text(arguments: Any) -> str:
    """The arguments as JSON text; a string that is not valid JSON is kept as the model wrote it."""
    args = _as_object(arguments)
    if isinstance(args, str):
        return args
    return _json(args)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer past 64 bits (from json-parsed text): json can write it
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_call(name: str, arguments: Any, key: str = "arguments") -> str:
    args = _as_object(arguments)
    if isinstance(args, str):  # broken JSON from an earlier turn stays as the model wrote it
        return '{"name": ' + _json(name) + f', "{key}": ' + args + "}"
    return _json({"name": name, key: args})


def render_call(fmt: str, name: str, arguments: Any) -> str:
    return _CALLS.get(fmt, _hermes)(name, arguments)


def render_result(fmt: str, name: str, call_id: str, text: str) -> str:
    return _RESULTS.get(fmt, _tool_response)(name, call_id, text)


def _as_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    return arguments if arguments is not None else {}


def _pairs(arguments: Any) -> list[tuple[str, str]] | None:
    """Key/value texts for the XML-ish formats (strings as written, the rest as JSON); None when the
    arguments are not an object (broken JSON from an earlier turn)."""
    args = _as_object(arguments)
    if not isinstance(args, Mapping):
        return None
    return [(str(k), v if isinstance(v, str) else _json(v)) for k, v in args.items()]


def _hermes(name: str, arguments: Any) -> str:
    return f"<tool_call>\n{json_call(name, arguments)}\n</tool_call>"


def _fenced(name: str, arguments: Any) -> str:
    return f"```json\n{json_call(name, arguments)}\n```"


def _qwen_xml(name: str, arguments: Any, wrap: tuple[str, str] = ("<tool_call>", "</tool_call>")) -> str:
    pairs = _pairs(arguments)
    if pairs is None:
        body = arguments_text(arguments)
    else:
        body = "\n".join(f"<parameter={k}>\n{v}\n</parameter>" for k, v in pairs)
    return f"{wrap[0]}\n<function={name}>\n{body}\n</function>\n{wrap[1]}"


def _seed(name: str, arguments: Any) -> str:
    return _qwen_xml(name, arguments, ("<seed:tool_call>", "</seed:tool_call>"))


def _glm(name: str, arguments: Any) -> str:
    pairs = _pairs(arguments)
    if pairs is None:
        return _hermes(name, arguments)
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
    return f"<tool_call>{name}\n{body}</tool_call>"


def _harmony(name: str, arguments: Any) -> str:
    return (f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
            f"{arguments_text(arguments)}<|call|>")


def _kimi(name: str, arguments: Any) -> str:
    return (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>"
            f"{arguments_text(arguments)}<|tool_call_end|><|tool_calls_section_end|>")


def _deepseek(name: str, arguments: Any) -> str:
    return (f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n"
            f"{arguments_text(arguments)}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")


def _deepseek_v31(name: str, arguments: Any) -> str:
    return (f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{arguments_text(arguments)}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")


def _command_r(name: str, arguments: Any) -> str:
    call = ('{"tool_call_id": "0", "tool_name": ' + json.dumps(name, ensure_ascii=False)
            + ', "parameters": ' + arguments_text(arguments) + "}")
    return f"<|START_ACTION|>[\n    {call}\n]<|END_ACTION|>"


def _functionary(name: str, arguments: Any) -> str:
    return f">>>{name}\n{arguments_text(arguments)}"


def _functionary_v31(name: str, arguments: Any) -> str:
    return f"<function={name}>{arguments_text(arguments)}</function>"


def _mistral(name: str, arguments: Any) -> str:
    return f"[TOOL_CALLS][{json_call(name, arguments)}]"


def _llama3(name: str, arguments: Any) -> str:
    return json_call(name, arguments, key="parameters")


def _pythonic(name: str, arguments: Any) -> str:
    args = _as_object(arguments)
    if not isinstance(args, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in args):
        return _hermes(name, arguments)
    return f"[{name}(" + ", ".join(f"{k}={_json(v)}" for k, v in args.items()) + ")]"


_CALLS: dict[str, Callable[[str, Any], str]] = {
    "hermes": _hermes, "json": _fenced, "qwen_xml": _qwen_xml, "glm": _glm, "seed": _seed,
    "harmony": _harmony, "kimi": _kimi, "deepseek": _deepseek, "deepseek_v31": _deepseek_v31,
    "command_r": _command_r, "functionary": _functionary, "functionary_v31": _functionary_v31,
    "mistral": _mistral, "llama3": _llama3,
    "pythonic": _pythonic,
}


def _tool_response(name: str, call_id: str, text: str) -> str:
    header = f'<tool_response name="{name}"' + (f' id="{call_id}"' if call_id else "") + ">"
    return f"{header}\n{text}\n</tool_response>"


def _harmony_result(name: str, call_id: str, text: str) -> str:
    return f"<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{text}<|end|>"


def _kimi_result(name: str, call_id: str, text: str) -> str:
    return f"## Return of {call_id or f'functions.{name}:0'}\n{text}"


def _deepseek_result(name: str, call_id: str, text: str) -> str:
    return f"<｜tool▁output▁begin｜>{text}<｜tool▁output▁end｜>"


def _command_r_result(name: str, call_id: str, text: str) -> str:
    result = {"tool_call_id": call_id or "0", "results": {"0": text}, "is_error": None}
    return f"<|START_TOOL_RESULT|>[{json.dumps(result, ensure_ascii=False)}]<|END_TOOL_RESULT|>"


def _mistral_result(name: str, call_id: str, text: str) -> str:
    result = {"content": text, "call_id": call_id} if call_id else {"content": text}
    return f"[TOOL_RESULTS]{json.dumps(result, ensure_ascii=False)}[/TOOL_RESULTS]"


_RESULTS: dict[str, Callable[[str, str, str], str]] = {
    "harmony": _harmony_result, "kimi": _kimi_result, "deepseek": _deepseek_result,
    "deepseek_v31": _deepseek_result, "command_r": _command_r_result, "mistral": _mistral_result,
}
