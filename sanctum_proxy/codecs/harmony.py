"""gpt-oss (OpenAI harmony) messages left in content, what llama.cpp and Ollama pass on when their own
parser fails on them:

    <|channel|>analysis<|message|>Need the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome"}
    <|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

A message with a recipient (`to=functions.NAME`, in the channel header or after the role) is a call; its body goes on
as written, whatever its content type (`json`, `code`). `to=assistant` is text; a built-in tool the request did not
offer (`browser.search`, `python`) is no call, its body reasoning. An `analysis` message is reasoning: its whole span
is claimed (so no codec reads calls in it); its text is reasoning, not content. A `final` or recipient-less
`commentary` message is content: only its header and end token are markup. Variants read: no `<|constrain|>` (`...
to=functions.f json<|message|>`), `<|end|>` or `<|return|>` instead of `<|call|>`, the name glued to `json`
(`to=functions.fjson`), a call on the analysis channel (`<|start|>assistant to=functions.f<|channel|>analysis`), the
recipient alone before `<|channel|>` (the generation prompt held `<|start|>assistant`), spaces around the channel
name; and a call whose tokens the server stripped (`assistantcommentary to=functions.NAME json{...}`, known names
only: `_stripped`).
"""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import arguments_text
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.lenient_json import Decoded, decode, value_end
from sanctum_proxy.core.shapes import JSONValue

NAME = "harmony"
STARTS: tuple[str, ...] = ("<|channel|>", "<|start|>", "assistantcommentary to=functions.", "commentary to=functions.",
                           "to=functions.")
# The role part: `<|start|>assistant to=...`, or only ` to=functions.NAME` where the generation prompt
# already held `<|start|>assistant` (llama.cpp's test of that case).
# (The blanks before a bare `to=` are taken by `_header_start`: in the regex, `[ \t]*to=` was tried from every
# blank of a long run, each time to its end: quadratic.)
# A tool's result written back (`<|start|>functions.f to=assistant<|message|>`) may have no channel.
_HEADER = re.compile(
    r"(?:<\|start\|>(?P<role>[^<]{0,256})|(?P<bare>to=[^\s<]{1,256}[ \t]*))?"
    r"(?:<\|channel\|>(?P<channel>[^<]{0,512})|(?<=to=assistant))(?:<\|constrain\|>(?P<ctype>[^<]{0,64}))?<\|message\|>"
)
_RECIPIENT = re.compile(r"\bto=([^\s<]{1,256})")
_BUILTIN = re.compile(r"(?:browser|container)\.\w{1,64}|python")
_STOP = re.compile(r"<\|(?:call|end|return)\|>|<\|start\|>|<\|channel\|>")  # an end token, or the next message


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _HEADER.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        start = _header_start(text, m, pos)
        body_end, end = _body_end(text, m.end())
        header = (m.group("role") or m.group("bare") or "") + " " + (m.group("channel") or "")
        recipient = _RECIPIENT.search(header)
        channel = ((m.group("channel") or "").split() or [""])[0]
        written = recipient.group(1) if recipient else ""
        to = _recipient_kind(written, tool_names) if recipient else "content"
        if to == "builtin":  # a built-in tool not offered: no call, its text is thinking (vLLM, llama.cpp)
            out.append(Found(start, end, (), text[m.end() : body_end].strip()))
        elif to == "call":
            body = text[m.end() : body_end].strip()
            name = _name(written, m.group("ctype"), tool_names)
            raw = text[start:end]
            out.append(Found(start, end, (Candidate(name, body or None, NAME, raw),)))
        elif channel == "analysis":
            out.append(Found(start, end, (), text[m.end() : body_end].strip()))
        else:
            out.append(Found(start, m.end(), ()))
            if end > body_end:
                out.append(Found(body_end, end, ()))
        pos = max(end, m.end())
    return out + _stripped(text, tool_names, out)


# A call whose special tokens the server dropped as it decoded them (`skip_special_tokens`; oobabooga/textgen#7374
# shows `analysisUser says ...assistantfinalHello!`): `assistantcommentary to=functions.NAME json{...}`, or with
# only some tokens gone (`commentary to=functions.NAME <|constrain|>json<|message|>{...}`).
_STRIPPED = re.compile(
    r"(?:assistant)?commentary[ \t]+to=functions\.(?P<name>[^\s<{\[]{1,256})[ \t]*(?:<\|constrain\|>)?[ \t]*"
    r"(?P<ctype>json)?[ \t]*(?:<\|message\|>)?[ \t\r\n]*(?=[{\[])"
)


# The whole answer a recipient and nothing else (llama.cpp before its harmony parser, ggml-org/llama.cpp#15181:
# ` to=functions.get_weather` and spaces): a call whose arguments never came.
_RECIPIENT_ONLY = re.compile(r"[\s\u200b]*(?:assistant)?(?:commentary)?[ \t]*to=functions\.([^\s<{\[]{1,256})"
                             r"(?:[ \t]*(?:<\|constrain\|>)?json)?[\s\u200b]*")


def _stripped(text: str, names: frozenset[str], taken: list[Found]) -> list[Found]:
    """Calls left without their channel tokens, to a known tool, with a JSON body (outside what the token-full
    reading took); or an answer that is only a recipient (a call without arguments, for tier 2 to ask for them).
    The text before them stays content: without its tokens nothing marks where reasoning ended."""
    out: list[Found] = []
    alone = _RECIPIENT_ONLY.fullmatch(text) if not taken else None
    if alone is not None and json_blocks.known(name := _name(alone.group(1), None, names), names):
        return [Found(0, len(text), (Candidate(name, None, NAME, text),))]
    if "commentary" not in text:
        return out
    for m in _STRIPPED.finditer(text):
        if len(out) >= json_blocks.MAX_ATTEMPTS or any(f.start <= m.start() < f.end for f in taken + out):
            continue
        name = _name(m.group("name"), m.group("ctype"), names)
        end = value_end(text, m.end())
        if end is None or not json_blocks.known(name, names) or not isinstance(decode(text[m.end() : end]), Decoded):
            continue  # an unknown name, or prose that shows the shape (`json{...}`)
        stop = _STOP.match(text, end)  # an end token that survived
        closed = stop.end() if stop and stop.group() not in ("<|start|>", "<|channel|>") else end
        out.append(Found(m.start(), closed, (Candidate(name, text[m.end() : end], NAME, text[m.start() : closed]),)))
    return out


def _recipient_kind(recipient: str, names: frozenset[str]) -> str:
    """"call"; "content" for `to=assistant` (a tool result written back, read as text as SGLang does); or
    "builtin" for a built-in tool (`browser.search`, `python`, `container.exec`) the request did not offer."""
    if recipient == "assistant":
        return "content"
    if _BUILTIN.fullmatch(recipient) and not json_blocks.known(recipient, names):
        return "builtin"
    return "call"


def _header_start(text: str, m: re.Match[str], pos: int) -> int:
    """Where the header begins: a bare recipient takes the blanks before it (never before `pos`)."""
    start = m.start()
    if m.group("bare") is not None:
        while start > pos and text[start - 1] in " \t":
            start -= 1
    return start


def _body_end(text: str, body: int) -> tuple[int, int]:
    """Where the message body ends and where its end token (if any) ends. A JSON body is read past its
    closing brace first, so an end token written inside a string does not cut it."""
    k = body
    while k < len(text) and text[k] in " \t\r\n":
        k += 1
    if k < len(text) and text[k] in "{[":
        closed = value_end(text, k)
        if closed is not None:
            k = closed
    stop = _STOP.search(text, k)
    if stop is None:
        return len(text), len(text)
    ends = stop.group() not in ("<|start|>", "<|channel|>")
    return stop.start(), stop.end() if ends else stop.start()


def _name(recipient: str, ctype: str | None, names: frozenset[str]) -> str:
    name = recipient.removeprefix("functions.")
    if ctype is None and name.endswith("json") and not json_blocks.known(name, names) \
            and json_blocks.known(name[:-4], names):
        name = name[:-4]  # `to=functions.get_weatherjson`: the content type glued to the name
    return name


def render_call(name: str, arguments: JSONValue) -> str:
    return (f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
            f"{arguments_text(arguments)}<|call|>")


def render_result(name: str, call_id: str, text: str) -> str:
    return f"<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{text}<|end|>"


CODEC = register(Codec(NAME, find, STARTS, rank=10))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has("<|channel|>"), detect_rank=10,
                       families=("gptoss", "gpt-oss")))
