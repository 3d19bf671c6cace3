"""How many tokens a chat request's prompt holds: llama.cpp's count, else an estimate that overcounts."""

from __future__ import annotations

import math
from typing import Any, Protocol

import orjson

from sanctum_proxy.core.shapes import JSONObject

CHARS_PER_TOKEN = 4
PROMPT_FIELDS = ("messages", "tools", "response_format")


class JsonProber(Protocol):
    async def probe_json(self, method: str, url: str, body: Any = None, timeout: float = 5.0,
                         client_auth: str | None = None) -> Any: ...


def estimate(chat: JSONObject) -> int:
    """Four characters of the prompt's JSON a token."""
    prompt = {k: chat[k] for k in PROMPT_FIELDS if k in chat}
    return max(1, math.ceil(len(orjson.dumps(prompt)) / CHARS_PER_TOKEN))


async def count(upstream: JsonProber, root_url: str, chat: JSONObject, timeout: float,
                client_auth: str | None = None) -> tuple[int, bool]:
    """(tokens, exact)."""
    body = {k: chat[k] for k in ("model", *PROMPT_FIELDS) if k in chat}
    rendered = await upstream.probe_json("POST", f"{root_url}/apply-template", body, timeout=timeout,
                                         client_auth=client_auth)
    prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
    if isinstance(prompt, str):
        tokens = await upstream.probe_json("POST", f"{root_url}/tokenize",
                                           {"content": prompt, "add_special": True}, timeout=timeout,
                                           client_auth=client_auth)
        listed = tokens.get("tokens") if isinstance(tokens, dict) else None
        if isinstance(listed, list):
            return len(listed), True
    return estimate(chat), False
