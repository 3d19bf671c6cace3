"""A real llama-server's own tool-parse failure, recovered through the proxy: a template that reads call arguments
as an object (`supports_object_arguments`) makes llama-server parse the history's arguments
(common/chat.cpp `workaround::func_args_not_string`), and a call whose arguments are not JSON (one a model cut
short, sent back by the client) is a 500 `Failed to parse tool call arguments as JSON`. The proxy sends such a
call as text before llama-server sees it (SpellHistoryMended), streamed or not, and the round is answered natively."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.upstreams.embedded import LlamaServer
from tests.e2e.conftest import _serve
from tests.stream_rules import read_stream
from tests.tools import WEATHER

# A ChatML template whose tool calls iterate over their arguments: llama-server's caps probe finds object
# arguments and tool calls supported.
TEMPLATE = """{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\\n' -}}
{%- if message.tool_calls -%}
{%- for tc in message.tool_calls -%}
{{- '<tool_call>\\n{"name": "' + tc.function.name + '", "arguments": {' -}}
{%- for k, v in tc.function.arguments.items() -%}{{- '"' + k + '": ' + (v | tojson) -}}
{%- if not loop.last -%}, {% endif -%}{%- endfor -%}
{{- '}}\\n</tool_call>' -}}
{%- endfor -%}
{%- elif message.content is string -%}{{- message.content -}}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if tools -%}{{- '<|im_start|>system\\nTools: ' -}}{%- for t in tools -%}{{- t.function.name + ' ' -}}{%- endfor -%}
{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": "And in Rome?"},
]
ASK = {"model": "m", "messages": HISTORY, "tools": [WEATHER], "max_tokens": 24, "temperature": 0}


@pytest.fixture(scope="module")
def object_arguments_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    template = Path(tmp_path_factory.mktemp("template")) / "object_arguments.jinja"
    template.write_text(TEMPLATE, encoding="utf-8")
    yield from _serve(jinja=True, extra_args=("--chat-template-file", str(template)))


def test_llama_server_answers_a_broken_history_call_with_its_parse_failure(object_arguments_server: LlamaServer):
    r = httpx.post(object_arguments_server.base_url + "/chat/completions", json=ASK, timeout=60)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert r.json()["error"]["message"].startswith("Failed to parse tool call arguments as JSON: [json.exception.")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_proxy_sends_the_cut_call_as_text_and_llama_server_answers(object_arguments_server: LlamaServer,
                                                                       proxy_to: Any, stream: bool):
    url = proxy_to(object_arguments_server)
    with httpx.stream("POST", url + "/v1/chat/completions", json={**ASK, "stream": stream}, timeout=120) as r:
        raw = r.read()
    assert r.status_code == 200, raw[:400]
    assert r.headers["x-sanctum-spell-calling"] == "native"
    omens = read_stream(raw).omens if stream else orjson.loads(raw)["sanctum"]["omens"]
    assert not [o for o in omens if o["type"] == "SpellCallingFallback"]
    mended = [o for o in omens if o["type"] == "SpellHistoryMended"]
    assert [(o["message"], o["spell"], o["as_text"], o["raw"]) for o in mended] == [
        (1, "get_weather", True, '{"city": "Par')]
