"""upstreams/tokens.py `estimate`: about a token per four characters of the prompt's JSON (messages, tools, answer
schema), other fields not counted, at least one. (`count`, llama.cpp's own count, is asked through the real
proxy in tests/test_messages_conformance.py.)"""

from __future__ import annotations

import math

import orjson

from sanctum_proxy.upstreams.tokens import CHARS_PER_TOKEN, estimate


def test_the_estimate_counts_the_prompt_fields_only() -> None:
    chat = {"messages": [{"role": "user", "content": "x" * 400}],
            "tools": [{"type": "function", "function": {"name": "f"}}]}
    expected = math.ceil(len(orjson.dumps(chat)) / CHARS_PER_TOKEN)
    assert estimate(chat) == expected
    assert estimate({**chat, "model": "m" * 1000, "temperature": 0.5}) == expected
    assert estimate({**chat, "response_format": {"type": "json_object"}}) > expected


def test_the_estimate_is_at_least_one() -> None:
    assert estimate({}) == 1
