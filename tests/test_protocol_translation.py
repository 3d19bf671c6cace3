"""The pure translations between the Responses / Messages APIs and chat completions (sanctum_proxy/protocols):
requests in each protocol's forms become the chat body the round loop takes, answers and stream events come
out in shapes the official SDKs' own types accept, and no input makes a translator fail other than with a
400 naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import InvalidRequest, ToolCallParseError
from sanctum_proxy.protocols import messages_api, responses_output, responses_request
from sanctum_proxy.protocols.messages_events import MessagesWriter
from sanctum_proxy.protocols.reply import Reply
from sanctum_proxy.protocols.responses_events import ResponsesWriter
from sanctum_proxy.repair.loop_data import ContentDelta, Final

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
RESPONSE_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


# Responses requests.

def test_flat_function_tools_and_each_tool_choice_form_become_chat_forms():
    tool = {"type": "function", "name": "get_weather", "description": "d", "parameters": SCHEMA, "strict": True}
    chat = responses_request.to_chat({"model": "m", "input": "hi", "tools": [tool], "parallel_tool_calls": False,
                                  "tool_choice": {"type": "function", "name": "get_weather"}})
    assert chat["tools"] == [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                                               "parameters": SCHEMA, "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    for choice in ("none", "auto", "required"):
        assert responses_request.to_chat({"model": "m", "input": "hi", "tool_choice": choice})["tool_choice"] == choice


def test_allowed_tools_keeps_only_the_listed_tools_with_its_mode():
    tools = [{"type": "function", "name": n, "parameters": SCHEMA} for n in ("a", "b")]
    chat = responses_request.to_chat({"model": "m", "input": "hi", "tools": tools, "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "b"}]}})
    assert [t["function"]["name"] for t in chat["tools"]] == ["b"] and chat["tool_choice"] == "required"


def test_input_items_become_chat_history_with_calls_joined_to_the_text_before_them():
    chat = responses_request.to_chat({"model": "m", "instructions": "Be brief.", "input": [
        {"type": "message", "role": "developer", "content": "Use metric units."},
        {"role": "user", "content": [{"type": "input_text", "text": "Look: "},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AAA"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}]})
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief.\n\nUse metric units."},  # one leading system message
        {"role": "user", "content": [{"type": "text", "text": "Look: "},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"}]


def test_sampling_fields_are_renamed_and_bookkeeping_fields_stay_home():
    chat = responses_request.to_chat({
        "model": "m", "input": "hi", "max_output_tokens": 9, "temperature": 0.2, "top_p": 0.9, "store": True,
        "metadata": {"a": "b"}, "include": ["reasoning.encrypted_content"], "truncation": "auto", "top_k": 5,
        "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_schema", "name": "w", "schema": SCHEMA}}})
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9,
                    "temperature": 0.2, "top_p": 0.9, "top_k": 5, "reasoning_effort": "low",
                    "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}}


@pytest.mark.parametrize(("body", "param"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools[0].type"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}], "tool_choice": {"type": "file_search"}},
     "tool_choice"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "input[0].content[0].image_url"),
    ({"input": [{"type": "web_search_call", "id": "w"}]}, "input[0].type"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
])
def test_what_needs_openai_state_or_servers_is_refused_naming_the_field(body, param):
    with pytest.raises(InvalidRequest) as caught:
        responses_request.to_chat({"model": "m", "input": "hi", **body})
    assert caught.value.param == param and caught.value.status == 400


# Messages requests.

def test_tool_use_and_tool_result_blocks_become_calls_and_tool_messages_before_the_user_text():
    chat = messages_api.to_chat({"model": "m", "max_tokens": 5, "system": [
        {"type": "text", "text": "One."}, {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "See "}, {"type": "image", "source": {
                "type": "base64", "media_type": "image/jpeg", "data": "AAA"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                              {"type": "text", "text": "Checking."},
                                              {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                          "content": "boom"}, {"type": "text", "text": "Go on."}]}]})
    assert chat["messages"] == [
        {"role": "system", "content": "One.\n\nTwo."},
        {"role": "user", "content": [{"type": "text", "text": "See "},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAA"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"},
        {"role": "user", "content": "Go on."}]
    assert chat["max_tokens"] == 5


def test_tools_tool_choice_and_sampling_fields_become_chat_forms():
    chat = messages_api.to_chat({
        "model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "stop_sequences": ["END"],
        "top_k": 3, "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 100},
        "tools": [{"name": "f", "description": "d", "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True}})
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "top_k": 3,
                    "stop": ["END"], "tools": [{"type": "function", "function": {
                        "name": "f", "parameters": SCHEMA, "description": "d"}}],
                    "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": False}
    ask = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    for given_choice, chat_choice in (({"type": "any"}, "required"), ({"type": "auto"}, "auto"),
                                      ({"type": "none"}, "none")):
        assert messages_api.to_chat({**ask, "tool_choice": given_choice})["tool_choice"] == chat_choice


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type"),
    ({"mcp_servers": [{"type": "url", "url": "http://x"}]}, "mcp_servers"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
     "messages[0].content[0].source"),
    ({"messages": [{"role": "tool", "content": "hi"}]}, "messages[0].role"),
    ({"system": 3}, "system"),
])
def test_what_the_proxy_cannot_serve_is_refused_naming_the_field(body, param):
    with pytest.raises(InvalidRequest) as caught:
        messages_api.to_chat({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                              **body})
    assert caught.value.param == param


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                    | st.sampled_from(["function", "message", "text", "tool_use", "tool_result", "image",
                                       "function_call", "function_call_output", "user", "assistant", "base64"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["type", "role", "content", "name", "input", "source", "text", "call_id",
                                         "output", "arguments", "tool_use_id", "id", "tools", "mode", "data"]),
                        inner, max_size=4), max_leaves=12)
FIELDS = st.dictionaries(st.sampled_from(["input", "instructions", "tools", "tool_choice", "messages", "system",
                                          "text", "reasoning", "previous_response_id"]), JSON, max_size=4)


@given(FIELDS)
def test_no_body_makes_a_translator_fail_but_with_a_400(body):
    for to_chat, required in ((responses_request.to_chat, {}), (messages_api.to_chat, {"max_tokens": 5})):
        try:
            chat = to_chat({"model": "m", **required, **body})
        except InvalidRequest as exc:
            assert exc.status == 400
        else:
            assert isinstance(chat["messages"], list)


# Answers, checked with the SDKs' own types.

def final(message: dict[str, Any], finish: str = "stop") -> Final:
    return Final(message, finish, {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}, "native", 1,
                 [], {}, "clean")


def reply(message: dict[str, Any], finish: str = "stop") -> Reply:
    return Reply.of(message, finish, {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})


def test_a_response_with_reasoning_text_and_a_call_is_a_valid_response():
    answer = reply({"role": "assistant", "content": "Checking.", "reasoning_content": "think",
                    "tool_calls": [CALL]}, "tool_calls")
    base = responses_output.skeleton({"model": "m", "tools": [{"type": "function", "name": "get_weather",
                                                            "parameters": SCHEMA}]}, "x", 1, "m")
    output = responses_output.output_items(answer, "x")
    response = Response.model_validate(responses_output.finished(base, answer, output))
    assert [o.type for o in response.output] == ["reasoning", "message", "function_call"]
    assert response.output_text == "Checking." and response.usage is not None and response.usage.total_tokens == 10


def test_an_answer_cut_by_max_tokens_is_an_incomplete_response():
    answer = reply({"role": "assistant", "content": "Par"}, "length")
    response = Response.model_validate(responses_output.finished(responses_output.skeleton({}, "x", 1, "m"), answer,
                                                                 responses_output.output_items(answer, "x")))
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_a_message_with_thinking_text_and_tool_use_is_a_valid_message():
    answer = Reply.of({"role": "assistant", "content": "Checking.", "tool_calls": [CALL]}, "tool_calls", None,
                      {"reasoning_content": "think"})
    message = Message.model_validate(messages_api.message(answer, "x", "m"))
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


def test_a_surrender_in_anthropic_shape_keeps_the_proxy_type_and_the_rejected_answers():
    body = messages_api.error_body(ToolCallParseError("gave up", rounds=3, rejected=["a", "b", "c"]))
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["sanctum_type"] == "spell_call_parse_error" and body["error"]["rejected"] == ["a", "b", "c"]


# Stream writers, each event checked with the SDKs' own event types.

def events_of(chunks: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for block in b"".join(chunks).decode().split("\n\n"):
        if block.startswith("event: "):
            out.append(orjson.loads(block.split("\n", 1)[1].removeprefix("data: ")))
    return out


def test_responses_writer_streams_live_text_then_the_rest_then_calls_in_order():
    writer = ResponsesWriter(responses_output.skeleton({}, "x", 1, "m"), "x", "t",
                             lambda f: reply(f.message, f.finish_reason))
    held = writer.render(om.Omen("SpellCallRepaired", 1, {"spell": "get_weather"}))  # sent with the next event
    chunks = [writer.opening(), *held, *writer.render(ContentDelta("Check")),
              *writer.render(final({"role": "assistant", "content": "Checking.", "tool_calls": [CALL]}, "tool_calls"))]
    assert b": omen " in b"".join(chunks)
    events = events_of(chunks)
    for event in events:
        RESPONSE_EVENT.validate_python(event)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Checking."
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert writer.ended


def test_responses_writer_ends_a_failed_stream_with_error_and_response_failed():
    writer = ResponsesWriter(responses_output.skeleton({}, "x", 1, "m"), "x", "t",
                             lambda f: reply(f.message, f.finish_reason))
    events = events_of([writer.opening(), *writer.render(ToolCallParseError("gave up", rounds=3, rejected=[]))])
    for event in events:
        RESPONSE_EVENT.validate_python(event)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]


def test_messages_writer_streams_live_text_then_thinking_then_tool_use():
    start = {"id": "msg_x", "type": "message", "role": "assistant", "model": "m", "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
    writer = MessagesWriter(start, "t", lambda f: Reply.of(f.message, f.finish_reason, f.usage,
                                                                  {"reasoning_content": "think"}))
    chunks = [writer.opening(), *writer.render(ContentDelta("Check")),
              *writer.render(final({"role": "assistant", "content": "Checking.", "tool_calls": [CALL]}, "tool_calls"))]
    events = events_of(chunks)
    for event in events:
        if event["type"] != "ping":  # not in the SDK's union: its stream skips pings before parsing
            MESSAGE_EVENT.validate_python(event)
    assert [e["type"] for e in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert [e["index"] for e in events if e["type"] == "content_block_start"] == [0, 1, 2]
    assert events[-2]["delta"]["stop_reason"] == "tool_use" and events[-2]["usage"] == {"input_tokens": 7,
                                                                                         "output_tokens": 3}


def test_images_in_tool_results_follow_the_tool_messages_as_a_user_message():
    image = {"type": "image", "source": {"type": "url", "url": "http://x/screen.png"}}
    chat = messages_api.to_chat({"model": "m", "max_tokens": 5, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                                          {"type": "tool_use", "id": "t2", "name": "f", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "shot"}, image]},
            {"type": "tool_result", "tool_use_id": "t2", "content": "done"}]}]})
    assert [m["role"] for m in chat["messages"]] == ["assistant", "tool", "tool", "user"]
    assert chat["messages"][1]["content"] == "shot"
    assert chat["messages"][3]["content"] == [{"type": "image_url", "image_url": {"url": "http://x/screen.png"}}]
    chat = responses_request.to_chat({"model": "m", "input": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "shot"}, {"type": "input_image", "image_url": "http://x/s.png"}]},
        {"role": "user", "content": "What do you see?"}]})
    assert [m["role"] for m in chat["messages"]] == ["assistant", "tool", "user", "user"]
    assert chat["messages"][2]["content"] == [{"type": "image_url", "image_url": {"url": "http://x/s.png"}}]


def test_claude_code_billing_block_is_left_out_and_its_mid_conversation_system_messages_merged():
    """Claude Code's request shape (llama.cpp PR 20623; anthropics/claude-code issue 96101): a billing block whose
    `cch` changes every request, and `role: system` messages after the user's turn, which many chat templates
    refuse ("System message must be at the beginning"): their text joins the leading system message (issue 29)."""
    chat = messages_api.to_chat({"model": "m", "max_tokens": 5, "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}],
        "messages": [{"role": "user", "content": "hey"}, {"role": "system", "content": [
            {"type": "text", "text": "<total_tokens>9 tokens left</total_tokens>",
             "cache_control": {"type": "ephemeral"}}]}]})
    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code, Anthropic's official CLI for Claude.\n\n"
                                      "<total_tokens>9 tokens left</total_tokens>"},
        {"role": "user", "content": "hey"}]


NAMESPACED = {"type": "namespace", "name": "crm", "description": "CRM tools.", "tools": [
    {"type": "function", "name": "find", "parameters": {"type": "object", "properties": {}}},
    {"type": "function", "name": "_update", "parameters": {"type": "object", "properties": {}}}]}


def test_namespace_functions_are_offered_flat_and_their_history_calls_read_back_flat():
    chat = responses_request.to_chat({"model": "m", "tools": [NAMESPACED], "input": [
        {"role": "user", "content": "Find Ann."},
        {"type": "function_call", "call_id": "c1", "name": "find", "namespace": "crm", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "namespace": "crm", "output": "Ann: 42"}],
        "tool_choice": {"type": "function", "name": "find", "namespace": "crm"}})
    assert [t["function"]["name"] for t in chat["tools"]] == ["crm__find", "crm__update"]  # Codex's flat names
    assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "crm__find"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "crm__find"}}
    assert responses_request.namespaced_names({"tools": [NAMESPACED]}) == {
        "crm__find": ("crm", "find"), "crm__update": ("crm", "_update")}


def test_allowed_tools_may_name_a_namespace_or_one_of_its_functions():
    tools = [{"type": "function", "name": "f"}, NAMESPACED]
    whole = responses_request.to_chat({"model": "m", "input": "hi", "tools": tools, "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "namespace", "name": "crm"}]}})
    one = responses_request.to_chat({"model": "m", "input": "hi", "tools": tools, "tool_choice": {
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "find", "namespace": "crm"},
                                                           {"type": "web_search"}]}})
    assert [t["function"]["name"] for t in whole["tools"]] == ["crm__find", "crm__update"]
    assert [t["function"]["name"] for t in one["tools"]] == ["crm__find"] and one["tool_choice"] == "auto"


@pytest.mark.parametrize(("tools", "param"), [
    ([{"type": "namespace", "name": "crm", "tools": [{"type": "custom", "name": "x"}]}], "tools[0].tools[0].type"),
    ([{"type": "namespace", "name": "crm"}], "tools[0]"),
    ([{"type": "function", "name": "crm__find"}, NAMESPACED], "tools"),  # one flat name twice
    ([{"type": "function"}], "tools[0].name"),
    (["web_search"], "tools[0].type"),
])
def test_namespace_and_tool_shapes_the_proxy_cannot_serve_are_a_400(tools, param):
    with pytest.raises(InvalidRequest) as caught:
        responses_request.to_chat({"model": "m", "input": "hi", "tools": tools})
    assert caught.value.param == param


@pytest.mark.parametrize("kind", ["web_search", "web_search_preview", "file_search", "code_interpreter",
                                  "image_generation", "mcp", "computer_use_preview", "local_shell", "shell",
                                  "apply_patch", "tool_search", "some_future_hosted_tool"])
def test_every_tool_type_but_function_namespace_and_custom_is_left_out(kind):
    body = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": kind}]}
    chat = responses_request.to_chat(body)
    assert [t["function"]["name"] for t in chat["tools"]] == ["f"]
    [omen] = responses_request.withheld_omens(body)
    assert omen.to_json()["type"] == "SpellsWithheld" and omen.fields["tools"] == [{"index": 1, "type": kind}]


def test_codex_cli_request_as_captured_becomes_a_plain_chat_request():
    # Codex CLI 0.171's first request of `codex exec` (tests/data: long texts trimmed, ids zeroed).
    body = orjson.loads((Path(__file__).parent / "data" / "codex_0.171_request.json").read_bytes())
    chat = responses_request.to_chat(body)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "user"]  # two developer messages merged
    assert len(chat["tools"]) == 12 and "multi_agent_v1__spawn_agent" in [t["function"]["name"] for t in chat["tools"]]
    assert set(chat) == {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "stream"}
    [omen] = responses_request.withheld_omens(body)
    assert omen.fields["tools"] == [{"index": 8, "type": "web_search"}]
