"""gpt-oss (OpenAI harmony) messages left in content when llama.cpp's or Ollama's parser fails on them."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import arguments_text
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.decoded_json import Decoded
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.lenient_json import decode
from sanctum_proxy.core.shapes import JSONValue

NAME = "harmony"
STARTS: tuple[str, ...] = ("<|channel|>", "<|start|>", "assistantcommentary to=functions.", "commentary to=functions.",
                           "to=functions.")
# The role part, or only ` to=functions.NAME` after a prompt-held `<|start|>assistant`; a result may lack a channel.
# Blanks before a bare `to=` are taken by `_header_start`: in the regex they were quadratic.
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


# A call whose special tokens the server dropped (`skip_special_tokens`): docs/formats.md.
_STRIPPED = re.compile(
    r"(?:assistant)?commentary[ \t]+to=functions\.(?P<name>[^\s<{\[]{1,256})[ \t]*(?:<\|constrain\|>)?[ \t]*"
    r"(?P<ctype>json)?[ \t]*(?:<\|message\|>)?[ \t\r\n]*(?=[{\[])"
)


# The whole answer a recipient and nothing else: a call whose arguments never came.
_RECIPIENT_ONLY = re.compile(r"[\s\u200b]*(?:assistant)?(?:commentary)?[ \t]*to=functions\.([^\s<{\[]{1,256})"
                             r"(?:[ \t]*(?:<\|constrain\|>)?json)?[\s\u200b]*")


def _stripped(text: str, names: frozenset[str], taken: list[Found]) -> list[Found]:
    """Calls left without their channel tokens to a known tool, or an answer that is only a recipient."""
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
    """"call"; "content" for a result written back (`to=assistant`); "builtin" for a tool not offered."""
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
    """Where the body ends, and its end token; a JSON body is read whole first."""
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
