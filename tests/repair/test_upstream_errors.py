"""Every tool-parse failure message of llama.cpp, Ollama and vLLM, answered in its server's own error body, through
the real proxy streamed and not: auto mode asks the request again prompted (and counts the failure); an output
the error quotes whole is read for calls first, with no other round. The source of each message is named beside
it (repository and file, read at ggml-org/llama.cpp master, ollama/ollama fb30760, vllm-project/vllm main; the
table in docs/contract.md section 4)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair.upstream_errors import classify, quoted_output
from sanctum_proxy.upstreams.error_mapping import upstream_error
from tests.fakes.upstream import (
    Step,
    completion,
    content_chunks,
    llama_error,
    llama_stream_error,
    ollama_api_error,
    ollama_v1_error,
    vllm_error,
)
from tests.polling import wait_until
from tests.stream_rules import read_stream
from tests.tools import WEATHER_DESCRIBED as WEATHER

ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
PROMPTED = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
PARIS = [{"name": "get_weather", "arguments": {"city": "Paris"}}]

# (message, source): every message the upstreams' tool parsers raise that reaches the client.
LLAMA = [
    ("Failed to parse input at pos 1360: <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
     "</parameter>\n</function>\n</tool_call>",
     "ggml-org/llama.cpp common/chat.cpp common_chat_peg_parse (pos > 0: ggml-org/llama.cpp#24644)"),
    ("Failed to parse input at pos 12: </tool_call>",
     "ggml-org/llama.cpp common/chat.cpp common_chat_peg_parse (ggml-org/llama.cpp#20761)"),
    ("The model produced output that does not match the expected peg-gemma4 format",
     "ggml-org/llama.cpp common/chat.cpp (newer builds; ggml-org/llama.cpp#25072)"),
    ("Invalid diff: now finding less tool calls!\n  Previous (1):\n    - name: 'get_weather', args: '{\"city\"'\n"
     "  Current (0):\n  Current msg text content:\n\n",
     "ggml-org/llama.cpp common/chat.cpp common_chat_msg_diff::compute_diffs"),
    ("Invalid diff: 'Let me' not found at start of 'Let'",
     "ggml-org/llama.cpp common/chat.cpp string_diff"),
    ("Invalid diff: tool call mismatch!", "ggml-org/llama.cpp common/chat.cpp common_chat_msg_diff::compute_diffs"),
    ("Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, "
     "column 131: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal",
     "ggml-org/llama.cpp common/chat.cpp workaround::func_args_not_string (vxcontrol/pentagi#313)"),
    ("Duplicate tool argument: city", "ggml-org/llama.cpp common/chat-peg-parser.cpp common_chat_peg_mapper::map"),
    ("Missing required tool argument: city",
     "ggml-org/llama.cpp common/chat-peg-parser.cpp common_chat_peg_mapper::map"),
]
OLLAMA = [
    ("error parsing tool call: raw='{\"city\": \"Paris\"', err=unexpected end of JSON input",
     "ollama/ollama harmony/harmonyparser.go HarmonyMessageHandler.Add"),
    ("failed to parse JSON: invalid character '}' looking for beginning of object key string",
     "ollama/ollama model/parsers/qwen3.go parseQwen3ToolCall"),
    ("empty function name", "ollama/ollama model/parsers/qwen3.go parseQwen3ToolCall, glm46.go"),
    ("XML syntax error on line 4: element <parameter> closed by </function>",
     "ollama/ollama model/parsers/qwen3coder.go parseToolCall (encoding/xml; also qwen35.go)"),
    ("unexpected end of JSON input", "ollama/ollama model/parsers/qwen3vl.go parseJSONToolCall (encoding/json)"),
    ("invalid character 'c' looking for beginning of object key string",
     "ollama/ollama model/parsers/qwen3vl.go parseJSONToolCall (encoding/json)"),
    ("incomplete GLM tool call: XML syntax error on line 1: unexpected EOF",
     "ollama/ollama model/parsers/glm46.go GLM46Parser.Add"),
    ("failed to parse XML: XML syntax error on line 2: element <arg_value> closed by </tool_call>",
     "ollama/ollama model/parsers/glm46.go parseGLM46ToolCall"),
    ('tool "get_wether" is not declared', "ollama/ollama model/parsers/glm46.go validateFinalGLM46ToolCall"),
    ('required argument "city" is missing for tool "get_weather"',
     "ollama/ollama model/parsers/glm46.go validateFinalGLM46ToolCall"),
    ("mismatched arg_key and arg_value counts: 2 keys, 1 values", "ollama/ollama model/parsers/glm46.go"),
    ("empty argument name", "ollama/ollama model/parsers/glm46.go validateFinalGLM46ToolCall"),
    ("failed to parse Laguna JSON tool call: unexpected end of JSON input", "ollama/ollama model/parsers/laguna.go"),
    ("failed to parse Laguna JSON tool call arguments: invalid character 'P' looking for beginning of value",
     "ollama/ollama model/parsers/laguna.go"),
    ("empty Laguna tool call name", "ollama/ollama model/parsers/laguna.go"),
    ('llama-server returned invalid tool call arguments for "get_weather": unexpected end of JSON input',
     "ollama/ollama llm/llama_server.go accumulatedToolCalls (native llama-server mode)"),
    ("llama-server chat error: The model produced output that does not match the expected peg-native format",
     "ollama/ollama llm/llama_server.go (native mode: llama.cpp's own message inside)"),
]
VLLM = [
    ('unexpected tokens remaining in message header: Some("to=functions.get_weather")',
     "openai_harmony HarmonyError in vllm-project/vllm chat serving (vllm-project/vllm#51977)"),
    ("Unexpected token 12606 while expecting start token 200006",
     "openai_harmony HarmonyError in vllm-project/vllm chat serving (vllm-project/vllm#22515)"),
]
BODIES = ([(m, s, llama_error(m)) for m, s in LLAMA] + [(m, s, ollama_v1_error(m)) for m, s in OLLAMA]
          + [(m, s, ollama_api_error(m)) for m, s in OLLAMA[:4]] + [(m, s, vllm_error(m)) for m, s in VLLM])


def post(client: httpx.Client, body: dict[str, Any] = ASK) -> httpx.Response:
    return client.post("/v1/chat/completions", json=body)


def streamed(proxy: str, body: dict[str, Any] = ASK) -> Any:
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**body, "stream": True}, timeout=20) as r:
        raw = r.read()
    assert r.status_code == 200, raw[:300]
    return read_stream(raw)


def calls_of(response: httpx.Response) -> list[dict[str, Any]]:
    calls = response.json()["choices"][0]["message"].get("tool_calls") or []
    return [{"name": c["function"]["name"], "arguments": orjson.loads(c["function"]["arguments"])} for c in calls]


@pytest.mark.parametrize(("message", "source", "answer"), BODIES, ids=[f"{i}" for i in range(len(BODIES))])
def test_each_parse_failure_is_classified_from_its_own_body(message, source, answer):
    error = upstream_error(answer[0], orjson.dumps(answer[1]))
    assert error.message == message, source
    assert classify(error) == "upstream_parse_failure", source


@pytest.mark.parametrize(("message", "source", "answer"), BODIES, ids=[f"{i}" for i in range(len(BODIES))])
def test_each_parse_failure_is_asked_again_prompted_streamed_and_not(proxy, fake, message, source, answer):
    with httpx.Client(base_url=proxy, timeout=20) as client:
        fake[0].push(Step(status=answer[0], body=answer[1]), Step(body=completion(PROMPTED)))
        r = post(client)
    assert r.status_code == 200, (source, r.text)
    assert calls_of(r) == PARIS and r.headers["x-sanctum-spell-calling"] == "prompted"
    omen = r.json()["sanctum"]["omens"][0]
    assert omen["reason"] == "upstream_parse_failure" and omen["message"] == message, source
    assert "tools" in fake[0].requests[0] and "tools" not in fake[0].requests[1]
    fake[0].push(Step(status=answer[0], body=answer[1]), Step(chunks=content_chunks(PROMPTED, size=7)))
    got = streamed(proxy)
    assert got.parsed_calls() == PARIS and got.omens[0]["reason"] == "upstream_parse_failure", source
    assert got.finish_reason == "tool_calls" and got.content == ""


def test_a_parse_failure_mid_stream_is_asked_again_prompted(proxy, fake):
    """llama.cpp after its first chunk: the error as an SSE event, no [DONE] (tools/server/server-context.cpp)."""
    message = "Invalid diff: now finding less tool calls!"
    fake[0].push(Step(chunks=[*content_chunks("Let me", size=3)[:-1], llama_stream_error(message)]),
                 Step(chunks=content_chunks("Let me check. " + PROMPTED)))
    got = streamed(proxy)
    assert got.content == "Let me check." and got.parsed_calls() == PARIS
    assert got.omens[0]["reason"] == "upstream_parse_failure"


@pytest.mark.parametrize("answer", [
    (400, {"error": {"message": "invalid character 'x' looking for beginning of value", "type": "invalid_request_error",
                     "param": None, "code": None}}),  # Ollama's 400 for a request body it cannot read: not a parser's
    (500, {"error": {"code": 500, "message": "CUDA error: out of memory", "type": "server_error"}}),
    (500, {"error": "model runner has unexpectedly stopped, this may be due to resource limitations"}),
    (500, {"error": {"message": "the tool call failed: invalid character in the file name", "type": "api_error"}}),
], ids=["ollama-400-json", "llama-oom", "ollama-runner", "prose-mentioning-invalid-character"])
def test_other_errors_are_not_parse_failures(client, fake, answer):
    fake[0].push(Step(status=answer[0], body=answer[1]))
    r = post(client)
    assert r.status_code == answer[0] and r.json()["error"]["type"] == "upstream_error"
    assert len(fake[0].requests) == 1


# Reading the quote (llama.cpp quotes the output from the failing position; from pos 0 that is all of it).
# Gemma's fenced JSON call, the shape llama.cpp fails on (ggml-org/llama.cpp#20650: "throws on a fenced tool call").
FENCED = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'


def test_a_whole_quoted_output_is_read_without_another_round(proxy, fake):
    failure = llama_error("Failed to parse input at pos 0: " + FENCED)
    with httpx.Client(base_url=proxy, timeout=20) as client:
        fake[0].push(Step(status=failure[0], body=failure[1]))
        r = post(client)
        assert r.status_code == 200 and calls_of(r) == PARIS and r.json()["choices"][0]["message"]["content"] is None
        assert r.headers["x-sanctum-rounds"] == "1" and len(fake[0].requests) == 1
        omen = r.json()["sanctum"]["omens"][0]
        assert omen["type"] == "SpellCallRepaired" and omen["repairs"][0] == "read_from_upstream_error"
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls" and r.json()["sanctum"]["mode"] == "native"
    fake[0].push(Step(status=failure[0], body=failure[1]))
    got = streamed(proxy)
    assert got.parsed_calls() == PARIS and got.content == ""
    assert got.omens[0]["repairs"][0] == "read_from_upstream_error"
    assert len(fake[0].requests) == 2


def test_a_quote_read_still_counts_towards_the_threshold(make_proxy, fake):
    failure = llama_error("Failed to parse input at pos 0: " + FENCED)
    with httpx.Client(base_url=make_proxy(parse_failure_threshold=2), timeout=20) as client:
        fake[0].checks.append(Step(status=failure[0], body=failure[1]))  # at the threshold the check fails too
        for _ in range(2):
            fake[0].push(Step(status=failure[0], body=failure[1]))
            assert calls_of(post(client)) == PARIS
        wait_until(lambda: client.get("/sanctum/status").json()["modes"][0]["mode"] == "prompted", 5, "the flip")
        fake[0].push(Step(body=completion(PROMPTED)))
        r = post(client)
    assert r.headers["x-sanctum-spell-calling"] == "prompted" and "tools" not in fake[0].requests[-1]


def test_a_quote_is_read_in_native_mode_too(client, fake):
    failure = llama_error("Failed to parse input at pos 0: Checking. " + PROMPTED)
    fake[0].push(Step(status=failure[0], body=failure[1]))
    r = client.post("/v1/chat/completions", json=ASK, headers={"x-sanctum-spell-calling": "native"})
    assert r.status_code == 200 and calls_of(r) == PARIS
    assert r.json()["choices"][0]["message"]["content"] == "Checking."


def test_a_quote_inside_ollamas_native_mode_error_is_read(client, fake):
    failure = ollama_v1_error("llama-server chat error: Failed to parse input at pos 0: " + FENCED)
    fake[0].push(Step(status=failure[0], body=failure[1]))
    assert calls_of(post(client)) == PARIS and len(fake[0].requests) == 1


def test_a_quote_mid_stream_is_read(proxy, fake):
    message = "Failed to parse input at pos 0: " + FENCED
    fake[0].push(Step(chunks=[*content_chunks("", size=3)[:1], llama_stream_error(message)]))
    got = streamed(proxy)
    assert got.parsed_calls() == PARIS and len(fake[0].requests) == 1


@pytest.mark.parametrize(("quote", "why"), [
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Par', "cut inside a string: tier 2 territory"),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"', "braces left open: the quote may stop there"),
    ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis", "an XML call left open"),
    ("```", "no call at all (a partial parse that failed on its first token)"),
    ("I cannot check the weather.", "text only: the answer may go on past the quote"),
    ('<tool_call>{"name": "get_forecast", "arguments": {"city": "Paris"}}</tool_call>', "an unknown tool: tier 2"),
], ids=["cut-string", "open-braces", "open-xml", "fence-only", "text-only", "unknown-tool"])
def test_a_quote_that_is_not_a_whole_valid_call_is_asked_again(client, fake, quote, why):
    failure = llama_error("Failed to parse input at pos 0: " + quote)
    fake[0].push(Step(status=failure[0], body=failure[1]), Step(body=completion(PROMPTED)))
    r = post(client)
    assert calls_of(r) == PARIS and len(fake[0].requests) == 2, why
    assert r.json()["sanctum"]["omens"][0]["reason"] == "upstream_parse_failure"


def test_only_a_whole_quote_from_position_zero_is_read():
    whole = upstream_error(500, orjson.dumps(llama_error("Failed to parse input at pos 0: " + FENCED)[1]))
    assert quoted_output(whole) == FENCED
    later = upstream_error(500, orjson.dumps(llama_error("Failed to parse input at pos 7: " + FENCED)[1]))
    assert quoted_output(later) is None  # the output's first 7 characters (a call among them?) are not quoted
    cut = upstream_error(500, b'{"error":{"code":500,"message":"Failed to parse input at pos 0: ```json\\n{\\"na')
    assert quoted_output(cut) is None and classify(cut) == "upstream_parse_failure"  # a body cut short: not whole
    assert quoted_output(UpstreamError(500, "Failed to parse input at pos 0: " + FENCED)) is None  # no body


# Ollama's harmony parser quotes the arguments it could not decode, not the tool's name (harmony/harmonyparser.go).
def test_ollamas_quoted_arguments_are_read_when_one_tool_is_offered(proxy, fake):
    failure = ollama_v1_error("error parsing tool call: raw='{'city': 'Paris'}', err=invalid character '\\'' "
                              "looking for beginning of object key string")
    with httpx.Client(base_url=proxy, timeout=20) as client:
        fake[0].push(Step(status=failure[0], body=failure[1]))
        r = post(client)
        assert calls_of(r) == PARIS and len(fake[0].requests) == 1
        assert r.json()["sanctum"]["omens"][0]["repairs"][:2] == ["read_from_upstream_error", "name_of_the_only_tool"]
    fake[0].push(Step(status=failure[0], body=failure[1]))
    got = streamed(proxy)
    assert got.parsed_calls() == PARIS and len(fake[0].requests) == 2


@pytest.mark.parametrize(("raw", "tools"), [
    ('{"city": "Paris"', [WEATHER]),  # cut short: closing it would guess the end
    ("{'city': 'Paris'}", [WEATHER, {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]),  # two tools: whose arguments?
], ids=["cut-short", "two-tools"])
def test_ollamas_quoted_arguments_are_asked_again_otherwise(client, fake, raw, tools):
    failure = ollama_v1_error(f"error parsing tool call: raw='{raw}', err=unexpected end of JSON input")
    fake[0].push(Step(status=failure[0], body=failure[1]), Step(body=completion(PROMPTED)))
    r = post(client, {**ASK, "tools": tools})
    assert calls_of(r) == PARIS and len(fake[0].requests) == 2
    assert r.json()["sanctum"]["omens"][0]["reason"] == "upstream_parse_failure"
