"""Cohere Command-R7B / Command-A."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import json_blocks
from sanctum_proxy.codecs.base import Codec, Format, blank, register, register_format, template_has
from sanctum_proxy.codecs.writing import arguments_text
from sanctum_proxy.core.calls import Found
from sanctum_proxy.core.shapes import JSONValue

NAME = "command_r"
_ACTION, _ACTION_END = "<|START_ACTION|>", "<|END_ACTION|>"
_THINK, _THINK_END = "<|START_THINKING|>", "<|END_THINKING|>"
_MARKERS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>")
STARTS: tuple[str, ...] = (_ACTION, _THINK, _MARKERS[0])


def find(text: str, tool_names: frozenset[str]) -> list[Found]:
    out = _thinking(text)
    out += _actions(blank(text, out), tool_names) if _ACTION in text else []
    taken = [(f.start, f.end) for f in out]
    for marker in _MARKERS:
        pos = 0
        while (at := text.find(marker, pos)) >= 0 and len(out) < json_blocks.MAX_ATTEMPTS:
            if not any(s <= at < e for s, e in taken):
                out.append(Found(at, at + len(marker), ()))
            pos = at + len(marker)
    return sorted(out, key=lambda f: f.start)


def _thinking(text: str) -> list[Found]:
    out: list[Found] = []
    pos = 0
    while (start := text.find(_THINK, pos)) >= 0 and len(out) < json_blocks.MAX_ATTEMPTS:
        close = text.find(_THINK_END, start)
        stops = [i for t in (_ACTION, _MARKERS[0]) if (i := text.find(t, start)) >= 0]
        if close >= 0:  # reasoning may quote an action: its closer ends it
            end = close + len(_THINK_END)
        else:  # not closed: the reasoning runs to the action or the answer, else to the end
            end = min(stops, default=len(text))
        inner = text[start + len(_THINK) : close if 0 <= close < end else end]
        out.append(Found(start, end, (), inner.strip()))
        pos = end
    return out


def _actions(text: str, names: frozenset[str]) -> list[Found]:
    out: list[Found] = []
    pos = 0
    for _ in range(json_blocks.MAX_ATTEMPTS):
        start = text.find(_ACTION, pos)
        if start < 0 or json_blocks.full(out):
            break
        body = start + len(_ACTION)
        end, calls = json_blocks.tagged(
            text, body, closers=(_ACTION_END,), stops=(_ACTION,), source=NAME, names=names
        )
        out.append(Found(start, end, tuple(calls)))
        pos = max(end, body)
    return out



def render_call(name: str, arguments: JSONValue) -> str:
    call = ('{"tool_call_id": "0", "tool_name": ' + json.dumps(name, ensure_ascii=False)
            + ', "parameters": ' + arguments_text(arguments) + "}")
    return f"{_ACTION}[\n    {call}\n]{_ACTION_END}"


def render_result(name: str, call_id: str, text: str) -> str:
    result = {"tool_call_id": call_id or "0", "results": {"0": text}, "is_error": None}
    return f"<|START_TOOL_RESULT|>[{json.dumps(result, ensure_ascii=False)}]<|END_TOOL_RESULT|>"


CODEC = register(Codec(NAME, find, STARTS, rank=20))
register_format(Format(NAME, NAME, render_call, render_result, detect=template_has(_ACTION), detect_rank=30))
