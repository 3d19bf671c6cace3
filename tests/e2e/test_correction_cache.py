"""How much of a correction round's prompt the real llama-server serves from its prompt cache (issue 21).

A ~10-turn conversation with `tool_choice: "required"` and a `max_tokens` too small for any whole call, so the
first round is always bounced and a correction round always follows (then, cut again, the proxy surrenders
with `on_surrender = "content"`, which keeps the test about the prompt, not the model). The correction round
is the last round, so the answer's `timings` (llama.cpp's own: `cache_n` tokens reused, `prompt_n` evaluated)
and the trace's per-round usage are that round's. Baseline before correction rounds kept the prompt: 172 of
556 prompt tokens from the cache (31%). Target: at least 90%. Measured here (this llama.cpp build reports
both `timings.cache_n` and `usage.prompt_tokens_details.cached_tokens`, and they agree): prompted 814 of 890
(91%), every token of the first round's prompt (and of the rejected answer) served from the cache; the old
"fresh" round 379 of 794 (48%). The native path (tool_choice "required", same tools) is not measured here:
SmolLM2's template drops the tools under --jinja (its /props says so), so its native corrections go prompted,
with the transcript (loop.py `_constraint`); with the tools kept, a native correction round on this
conversation took 529 of 605 (87%): the same 76 new tokens against a shorter prompt (the template renders the
tools compactly).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sanctum_proxy.upstreams.embedded import LlamaServer

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
RULES = (
    "You are a helpful travel assistant for a small agency. Follow these rules in every answer. "
    "Be friendly and concise: two or three sentences unless the traveller asks for more. "
    "Use the tools whenever a question needs live data: the weather for a city, or its local time. "
    "Never guess the weather or the time; call the tool and then answer with what it returned. "
    "When a traveller names several cities, keep the order they gave. "
    "Suggest trains over flights when the journey is shorter than six hours. "
    "Prices: say that they change and that the traveller should check before booking. "
    "Museums: mention that many are closed one day a week and that booking ahead saves queues. "
    "Food: suggest local dishes and markets rather than chains. "
    "Safety: remind travellers to keep copies of their documents and to watch for pickpockets in crowds. "
    "Money: most places take cards, but small cafes and markets may want cash. "
    "Language: a few words of the local language are appreciated; offer them when asked. "
    "Packing: layers and comfortable shoes; an umbrella in spring and autumn. "
    "Health: travellers from the EU should carry their health insurance card. "
    "Never invent opening hours, addresses or phone numbers. "
    "If a question is outside travel, answer briefly and steer back to the trip."
)
CONVERSATION = [
    {"role": "system", "content": RULES},
    {"role": "user", "content": "Hi! I'm planning a trip to Europe next month."},
    {"role": "assistant", "content": "That sounds exciting! Which cities are you thinking of visiting?"},
    {"role": "user", "content": "Paris first, then Berlin, and maybe Rome at the end."},
    {"role": "assistant", "content": "A classic route. Paris to Berlin is easy by train, and Rome is a short "
                                     "flight from Berlin. How many days do you have?"},
    {"role": "user", "content": "About two weeks in total. I like museums and good food. What time is it in "
                                "Berlin now? I need to call a hotel there."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Berlin"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Berlin", "time": "14:05", "zone": "CET"}'},
    {"role": "assistant", "content": "It is 14:05 in Berlin, a good time to call. For two weeks, give Paris five "
                                     "days, Berlin four and Rome five."},
    {"role": "user", "content": "Great plan. What should I pack?"},
    {"role": "assistant", "content": "Layers, comfortable walking shoes, a light rain jacket and an adapter "
                                     "for European plugs. I can check the weather for you if you like."},
    {"role": "user", "content": "Yes please, what is the weather in Paris right now?"},
]


def correction_round(proxy: str, **sanctum: Any) -> dict[str, Any]:
    body = {"model": "smollm2", "messages": CONVERSATION, "tools": [WEATHER, TIME], "tool_choice": "required",
            "max_tokens": 6, "temperature": 0, "sanctum": sanctum}
    response = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    trace = httpx.get(f"{proxy}/sanctum/traces/{response.headers['x-sanctum-trace-id']}", timeout=30).json()
    assert len(trace["rounds"]) == 2, [r["outcome"] for r in trace["rounds"]]
    first, second = (r["sent"] for r in trace["rounds"])
    timings = response.json().get("timings") or {}
    usage = trace["rounds"][1]["usage"] or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    share = timings["cache_n"] / (timings["cache_n"] + timings["prompt_n"]) if "cache_n" in timings else None
    reused = timings.get("cache_n", cached)
    print(f"\n{sanctum}: first round prompt_tokens={trace['rounds'][0]['usage']['prompt_tokens']}; correction round"
          f" timings cache_n={timings.get('cache_n')} prompt_n={timings.get('prompt_n')} "
          f"usage prompt_tokens={usage.get('prompt_tokens')} cached_tokens={cached} share={share}")
    return {"share": share, "cached_tokens": cached, "prompt_tokens": usage.get("prompt_tokens"), "reused": reused,
            "first_prompt_tokens": trace["rounds"][0]["usage"]["prompt_tokens"], "kept": second["messages"][
                :len(first["messages"])] == first["messages"], "sent": second}


def assert_mostly_cached(got: dict[str, Any], target: float) -> None:
    """Every token of the first round's prompt comes from the cache (only the new turns are evaluated: the
    rejected answer's closing and the correction, 76 tokens here, most of them the correction's list of the
    tools), and that is at least `target` of the correction round's prompt."""
    assert got["kept"], "the correction round's messages begin with the first round's"
    if got["share"] is None and got["cached_tokens"] is None:
        pytest.skip("this llama-server reports neither timings.cache_n nor usage cached_tokens")
    assert got["reused"] >= got["first_prompt_tokens"], got
    share = got["share"] if got["share"] is not None else got["cached_tokens"] / got["prompt_tokens"]
    assert share >= target, got


def test_a_prompted_correction_round_is_served_from_the_prompt_cache(llama_nojinja: LlamaServer, proxy_to: Any):
    proxy = proxy_to(llama_nojinja, on_surrender="content", max_repair_rounds=1)
    # Measured: first round 809 tokens, correction round 890 of which 814 cached (91%).
    got = correction_round(proxy, spell_calling="prompted")
    assert "get_weather" in got["sent"]["grammar"]  # the real server took the GBNF grammar (a 200, two rounds)
    assert_mostly_cached(got, 0.9)


def test_fresh_correction_rounds_for_comparison(llama_nojinja: LlamaServer, proxy_to: Any):
    """The old round (correction_context = "fresh"): its rewritten prompt loses the cache from the tools on
    (measured: 379 of 794 prompt tokens cached, 48%)."""
    proxy = proxy_to(llama_nojinja, on_surrender="content", max_repair_rounds=1, correction_context="fresh")
    got = correction_round(proxy, spell_calling="prompted")
    if got["share"] is not None:
        assert not got["kept"] and got["reused"] < got["first_prompt_tokens"], got  # what transcript rounds fix
