"""codecs/llama.py on its own: Llama 3.1's `<|python_tag|>` and Llama 4's `<|python_start|>...<|python_end|>`
(Rapid-MLX PR 703 and vLLM issue 16214, verbatim), with "parameters" for the arguments. Bare JSON calls are the
json codec's (its format "llama3" reads back through it)."""

from __future__ import annotations

from sanctum_proxy.codecs import llama
from sanctum_proxy.core.shapes import JSONValue

NAMES = frozenset({"get_weather", "brave_web_search"})


def calls(text: str) -> list[tuple[str, JSONValue]]:
    return [(c.name, c.arguments) for f in llama.find(text, NAMES) for c in f.candidates]


def test_a_call_after_python_tag_is_read() -> None:
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"location": "Paris"}}'
    assert calls(text) == [("get_weather", {"location": "Paris"})]


def test_a_call_between_python_start_and_end_is_read_with_its_markers() -> None:
    text = '<|python_start|>{"name": "brave_web_search", "parameters": {"query": "latest news"}}<|python_end|>'
    assert calls(text) == [("brave_web_search", {"query": "latest news"})]
    (found,) = llama.find(text, NAMES)
    assert (found.start, found.end) == (0, len(text))


def test_bare_json_is_not_llama_markup() -> None:
    assert llama.find(llama.render_call("get_weather", {"city": "Paris"}), NAMES) == []
