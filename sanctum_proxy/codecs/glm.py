"""GLM-4.5 / 4.6 calls: the name right after `<tool_call>`, then key/value tag pairs."""

from __future__ import annotations

import re

from sanctum_proxy.codecs import hermes, json_blocks, qwen_xml
from sanctum_proxy.codecs.base import Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import pairs
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "glm"
STARTS: tuple[str, ...] = ("<tool_call>",)
# The layout between tags is newlines, or their escapes where a server wrote the template's `\n` as text.
# Hy3's template writes `<tool_sep>` after the name and wraps the calls in `<tool_calls>...</tool_calls>`.
_CALL = re.compile(r"<tool_call>\s*([A-Za-z_][\w.\-]{0,255})(?:\s|\\n)*(?:<tool_sep>\s*)?(?=<arg_key>|</tool_call>)")
_WRAP_OPEN = re.compile(r"<tool_calls>\s*\Z")
_WRAP_CLOSE = re.compile(r"\s*</tool_calls>")
_KEY = re.compile(r"(?:\s|\\n)*<arg_key>([^<]{0,256})</arg_key>(?:\s|\\n)*<arg_value>")
_CLOSE = re.compile(r"\s*</tool_call>")
_VALUE_END = re.compile(r"</arg_value>|<arg_key>|</tool_call>|<tool_call>")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    if "<arg_key>" not in text and not _CALL.search(text):
        return []
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = _CALL.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        args, k, repairs = _pairs(text, m.end())
        close = _CLOSE.match(text, k)
        if close:
            k = close.end()
        else:
            repairs.append("unclosed_tag")
        raw = text[m.start() : k]
        wrap = _WRAP_OPEN.search(text, max(pos, m.start() - 64), m.start())
        close = _WRAP_CLOSE.match(text, k)
        start, k = wrap.start() if wrap else m.start(), close.end() if close else k
        out.append(Found(start, k, (Candidate(m.group(1), args, NAME, raw, None, tuple(repairs)),)))
        pos = max(k, m.end())
    return out


def _pairs(text: str, k: int) -> tuple[dict[str, JSONValue], int, list[str]]:
    args: dict[str, JSONValue] = {}
    repairs: list[str] = []
    while p := _KEY.match(text, k):
        stop = _VALUE_END.search(text, p.end())  # the first tag after the value (one scan, never quadratic)
        if stop is not None and stop.group() == "</arg_value>":
            args.setdefault(p.group(1).strip(), qwen_xml.laid_out(text[p.end() : stop.start()]))
            k = stop.end()
            continue
        end = k = len(text) if stop is None else stop.start()
        if stop is not None:  # `</arg_value>` left out: the value ends where the next tag begins
            repairs.append("unclosed_tag")
        args.setdefault(p.group(1).strip(), text[p.end() : end].strip("\n"))
    return args, k, repairs


def render_call(name: str, arguments: JSONValue) -> str:
    kv = pairs(arguments)
    if kv is None:  # not an object (broken JSON from an earlier turn): Hermes keeps it as written
        return hermes.render_call(name, arguments)
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in kv)
    return f"<tool_call>{name}\n{body}</tool_call>"


CODEC = register(Codec(NAME, find, STARTS, rank=60, text_values=True))
register_format(Format(NAME, NAME, render_call, detect=template_has("<arg_key>"), detect_rank=50,
                       families=("glm4moe",)))
