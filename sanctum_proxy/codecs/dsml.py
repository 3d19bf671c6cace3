"""DeepSeek V3.2 / V4 DSML calls in content (DeepSeek's encoding_dsv32.py; vLLM's `deepseekv32` parser)."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any, cast

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import MAX_CANDIDATES, Codec, Format, register, register_format, template_has
from sanctum_proxy.codecs.writing import as_object, pairs, to_json
from sanctum_proxy.core.calls import Candidate, Found
from sanctum_proxy.core.decoded_json import Decoded
from sanctum_proxy.core.json_scan import value_end
from sanctum_proxy.core.lenient_json import decode
from sanctum_proxy.core.shapes import JSONValue

NAME = "dsml"
TOKEN = "｜DSML｜"
# The token as models spell it; GigaChat 3.5 writes the same markup with `｜GCML｜`.
_T = r"[ \t]*[｜|]{1,2}[ \t]*(?:DSML|GCML)[ \t]*[｜|]{1,2}[ \t]*"
_BLOCK = r"(?:function_calls|tool_calls|tool_use|calls)"
STARTS: tuple[str, ...] = (f"<{TOKEN}", "<|DSML|", "<｜｜DSML", "<||DSML", "< | DSML", "<function_calls>", "<｜GCML｜")


class _Tags:
    """The DSML tags, with the token or, inside a `<function_calls>` block, without it."""

    def __init__(self, token: str, block: str) -> None:
        self.block_open = re.compile(rf"<{token}{block}[ \t]*>?")
        self.block_close = re.compile(rf"\s*</{token}{block}[ \t]*>")
        self.invoke = re.compile(rf'<{token}invoke\s+name="([^"\n]{{1,256}})"\s*>')
        self.invoke_close = re.compile(rf"</{token}invoke\s*>")
        self.parameter = re.compile(
            rf'\s*<{token}parameter\s+name="([^"\n]{{1,256}})"(?:\s+string="(true|false)")?\s*>')
        self.parameter_close = re.compile(rf"</{token}parameter\s*>")
        self.any_tag = re.compile(rf"</?{token}(?:invoke|parameter|{block})\b")


_DSML = _Tags(_T, _BLOCK)
_PLAIN = _Tags("", "function_calls")
_PLAIN_BLOCK = re.compile(r"<function_calls>\s*(?=<invoke\s+name=)")


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out = _find(text, _DSML, None)
    if "<function_calls>" in text:
        blocks = [m.end() for m in _PLAIN_BLOCK.finditer(text)]
        out += [f for f in _find(text, _PLAIN, blocks) if not any(f.start < g.end and g.start < f.end for g in out)]
    return sorted(out, key=lambda f: f.start)


def _find(text: str, tags: _Tags, only_at: list[int] | None) -> list[Found]:
    """Blocks of invokes (`only_at`: only those whose first invoke starts at one of these places)."""
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        m = tags.invoke.search(text, pos)
        if m is None or json_blocks.full(out):
            break
        if only_at is not None and m.start() not in only_at:
            pos = m.end()
            continue
        start = m.start()
        opener = _last_block_open(text, pos, start, tags)
        if opener is not None:
            start = opener
        calls: list[Candidate] = []
        k = m.start()
        while (inv := tags.invoke.match(text, k)) is not None and len(calls) < MAX_CANDIDATES:
            end, call = _invoke(text, inv, tags)
            calls.append(call)
            k = _skip_ws(text, end)
        close = tags.block_close.match(text, _last_end(text, k))
        end = close.end() if close else _last_end(text, k)
        out.append(Found(start, end, tuple(calls)))
        pos = max(end, m.end())
    return out


def _last_block_open(text: str, pos: int, invoke: int, tags: _Tags) -> int | None:
    """The block opener right before the first invoke (whitespace between), if any."""
    best = None
    for b in tags.block_open.finditer(text, pos, invoke):
        if not text[b.end() : invoke].strip():
            best = b.start()
    return best


def _skip_ws(text: str, k: int) -> int:
    while k < len(text) and text[k] in " \t\r\n":
        k += 1
    return k


def _last_end(text: str, k: int) -> int:
    """Back over the whitespace `_skip_ws` passed (it belongs to what follows the calls)."""
    while k > 0 and text[k - 1] in " \t\r\n":
        k -= 1
    return k


def _invoke(text: str, m: re.Match[str], tags: _Tags) -> tuple[int, Candidate]:
    name = html.unescape(m.group(1).strip())
    body = _skip_ws(text, m.end())
    repairs: list[str] = []
    if text.startswith(("{", "["), body) and (end := value_end(text, body)) is not None:
        args: str | dict[str, JSONValue] = text[body:end]
        k = end
    else:
        args, k, repairs = _parameters(text, m.end(), tags)
    close = tags.invoke_close.match(text, _skip_ws(text, k))
    if close:
        k = close.end()
    else:
        repairs.append("unclosed_tag")
    return k, Candidate(name, args, NAME, text[m.start() : k], None, tuple(dict.fromkeys(repairs)))


def _parameters(text: str, k: int, tags: _Tags) -> tuple[dict[str, JSONValue], int, list[str]]:
    args: dict[str, JSONValue] = {}
    repairs: list[str] = []
    while (p := tags.parameter.match(text, k)) is not None:
        nxt = tags.any_tag.search(text, p.end())  # its closer, or the tag that cuts it short (linear: no rescan)
        close = tags.parameter_close.match(text, nxt.start()) if nxt is not None else None
        if close is None:
            repairs.append("unclosed_tag")
            stop = nxt.start() if nxt is not None else len(text)
            value, k = text[p.end() : stop], stop
        else:
            value, k = text[p.end() : close.start()], close.end()
        args.setdefault(p.group(1).strip(), _value(value, p.group(2)))
    return args, k, repairs


def _value(text: str, string: str | None) -> Any:
    """A parameter's value: the text (string="true"), else the JSON it holds where it parses."""
    if string == "true":
        return text
    decoded = decode(text.strip()) if text.strip() else None
    if not isinstance(decoded, Decoded) or "json_repair" in decoded.repairs:
        return text  # json_repair would guess at its structure: left to validation (tier 2)
    return decoded.value


def render_call(name: str, arguments: JSONValue) -> str:
    kv = pairs(arguments)
    if kv is None:  # broken JSON from an earlier turn: written inside the invoke as it was
        body = arguments if isinstance(arguments, str) else to_json(arguments)
    else:
        parsed = cast(Mapping[str, object], as_object(arguments))  # pairs() found an object
        lines = []
        for key, text in kv:
            is_str = isinstance(parsed.get(key), str)
            lines.append(f'<{TOKEN}parameter name="{key}" string="{"true" if is_str else "false"}">{text}'
                         f"</{TOKEN}parameter>")
        body = "\n".join(lines)
    return (f'<{TOKEN}function_calls>\n<{TOKEN}invoke name="{name}">\n{body}\n</{TOKEN}invoke>\n'
            f"</{TOKEN}function_calls>")


CODEC = register(Codec(NAME, find, STARTS, rank=72))
register_format(Format(NAME, NAME, render_call, detect=template_has(TOKEN), detect_rank=60))
