"""Each model prompted in its own call format: the family read from the upstream's chat template, calls and
tool results written in that family's shapes (and read back by its codec), rejected calls quoted in it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sanctum_proxy.codecs import families
from sanctum_proxy.codecs.registry import FORMATS
from sanctum_proxy.config import load_settings
from sanctum_proxy.repair.prompted import to_prompted
from sanctum_proxy.repair.round_body import rejected_answer_text
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.upstreams.capabilities import from_props, from_show
from tests.codecs.test_corpus import TEMPLATES
from tests.fakes.upstream import Step, completion, content_chunks
from tests.stream_rules import read_stream

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                          "required": ["city"]}}}
BOOK = Toolbox.from_tools([WEATHER])
# TEMPLATES: each format's line of its models' real chat template (llama.cpp models/templates/*.jinja, Ollama's
# Modelfiles), kept with its corpus (tests/corpus/*.json `templates`): enough for detection, which looks for markers.
@pytest.mark.parametrize(("family", "template"), TEMPLATES.items(), ids=list(TEMPLATES))
def test_family_is_read_from_the_chat_template(family: str, template: str) -> None:
    assert families.detect(template) == family
    assert from_props({"chat_template_caps": {"supports_tools": True}, "chat_template": template}).family == family
    assert from_show({"capabilities": ["completion"], "template": template}).family == family


def test_every_detected_format_has_a_real_template_line() -> None:
    detected = {name for name, fmt in FORMATS.items() if fmt.detect is not None}
    assert detected == set(TEMPLATES), "a format that detects its template needs a template line in its corpus"


def test_unknown_template_falls_back_and_ollama_family_helps() -> None:
    assert families.detect("{{ messages }}") is None and families.detect(None) is None
    assert from_show({"capabilities": [], "template": "{{ .Prompt }}", "details": {"family": "gptoss"}}).family \
        == "harmony"
    assert from_props({"chat_template_caps": {}}).family is None


def history() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C"},
            {"role": "tool", "tool_call_id": "c2", "content": "21C"}]


def test_prompted_history_is_written_in_the_family_shapes() -> None:
    body = to_prompted({"model": "m", "messages": history(), "tools": [WEATHER]}, BOOK, "kimi")
    system, _, assistant, results = body["messages"]
    assert "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{" in system["content"]
    assert "<tool_response" not in system["content"]
    assert assistant["content"].count("<|tool_calls_section_begin|>") == 2
    assert '{"city":"Rome' in assistant["content"]  # broken arguments stay as written
    assert results == {"role": "user", "content": "## Return of c1\n18C\n## Return of c2\n21C"}
    harmony = to_prompted({"model": "m", "messages": history(), "tools": [WEATHER]}, BOOK, "harmony")
    assert harmony["messages"][3]["content"].startswith(
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>18C<|end|>")


def test_rejected_native_call_is_quoted_in_the_family_format() -> None:
    message = {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}]}
    assert rejected_answer_text(message, "glm") == \
        'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par}\n</tool_call>'
    assert rejected_answer_text(message, "deepseek_v31") == (
        'Checking.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Par'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    assert rejected_answer_text(message).startswith("Checking.\n<tool_call>\n")  # Hermes unless known


def test_config_accepts_every_format_and_refuses_others() -> None:
    assert load_settings({}).prompt_format == "auto"
    assert load_settings({"prompt_formats": {"gpt-oss*": "harmony"}}).prompt_format_for("gpt-oss-20b") == "harmony"
    with pytest.raises(Exception, match="prompt_format"):
        load_settings({"prompt_format": "xml"})


HARMONY_PROPS = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False},
                 "chat_template": TEMPLATES["harmony"]}
ASK = {"model": "gpt-oss", "messages": history(), "tools": [WEATHER]}
HARMONY_ANSWER = ("<|channel|>analysis<|message|>Need Oslo too.<|end|><|start|>assistant<|channel|>commentary "
                  'to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>')


def test_prompted_model_is_prompted_in_the_format_of_its_template(make_proxy: Any, fake: Any) -> None:
    fake[0].props = HARMONY_PROPS
    fake[0].push(Step(body=completion(HARMONY_ANSWER)))
    with httpx.Client(base_url=make_proxy(), timeout=60) as client:
        r = client.post("/v1/chat/completions", json=ASK, headers={"x-sanctum-spell-calling": "prompted"})
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"city": "Oslo"}']
    assert message["content"] is None and message["reasoning_content"] == "Need Oslo too."
    sent = fake[0].requests[0]["messages"]
    assert "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" in sent[0]["content"]
    assert sent[2]["content"].startswith("<|start|>assistant<|channel|>commentary to=functions.get_weather")
    assert "<|start|>functions.get_weather to=assistant" in sent[3]["content"]
    assert fake[0].probes == ["props"]


def test_configured_format_overrides_the_template_without_a_probe(make_proxy: Any, fake: Any) -> None:
    fake[0].props = HARMONY_PROPS
    fake[0].push(Step(body=completion('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>')))
    with httpx.Client(base_url=make_proxy(prompt_formats={"gpt-*": "hermes"}), timeout=60) as client:
        r = client.post("/v1/chat/completions", json=ASK, headers={"x-sanctum-spell-calling": "prompted"})
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert "<tool_call>" in fake[0].requests[0]["messages"][0]["content"] and fake[0].probes == []


FUNCTIONARY_PROPS = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False},
                     "chat_template": TEMPLATES["functionary"]}


@pytest.mark.parametrize(("answer", "content", "calls"), [
    ('get_weather\n{"city": "Oslo"}', "", ['{"city": "Oslo"}']),
    ("all\nIt is sunny in Oslo.", "It is sunny in Oslo.", []),
], ids=["bare-call", "bare-text"])
def test_functionary_stream_never_shows_its_bare_first_part(make_proxy: Any, fake: Any, answer: str, content: str,
                                                             calls: list[str]) -> None:
    """Functionary's generation prompt ends with `>>>`: the answer opens with the part's name, no marker."""
    fake[0].props = FUNCTIONARY_PROPS
    fake[0].push(Step(chunks=content_chunks(answer, size=3)))
    body = {**ASK, "model": "functionary", "stream": True}
    with httpx.Client(base_url=make_proxy(), timeout=60) as client:
        r = client.post("/v1/chat/completions", json=body, headers={"x-sanctum-spell-calling": "prompted"})
    got = read_stream(r.content)
    assert got.content == content and [c["arguments"] for c in got.calls] == calls
    assert ">>>get_weather\n{" in fake[0].requests[0]["messages"][0]["content"]


def test_gemma4_history_is_written_as_its_template_writes_it() -> None:
    """Gemma 4's template (llama.cpp models/templates/gemma4.jinja): `call:NAME{k:v}` between its call tokens,
    keys sorted and bare, strings between `<|"|>`; results as `response:NAME{value:...}`. Read back whole."""
    body = to_prompted({"model": "m", "messages": history(), "tools": [WEATHER]}, BOOK, "gemma4")
    _, _, assistant, results = body["messages"]
    assert '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>' in assistant["content"]
    assert '<|tool_call>call:get_weather{{"city":"Rome}<tool_call|>' in assistant["content"]  # kept as written
    assert '<|tool_response>response:get_weather{value:<|"|>18C<|"|>}<tool_response|>' in results["content"]
    text = families.render_call("gemma4", "get_weather", {"city": "Paris", "days": 3, "opts": {"b": [True, None]}})
    assert text == '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{b:[true,null]}}<tool_call|>'
