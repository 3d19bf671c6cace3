"""/v1/messages sends the upstream one leading system message (protocols/system_messages.py): Claude Code's
`system` message after the user's turn (its "# Environment" block, captured from Claude Code 2.1.332) and any
later ones join the top-level `system`, in order, each text kept; the rest of the conversation keeps its order."""

from __future__ import annotations

from typing import Any

import httpx

from sanctum_proxy.protocols import messages_api
from sanctum_proxy.protocols.system_messages import merge_system_messages

ENV = "# Environment\nYou have been invoked in the following environment: \n - Primary working directory: /tmp/w"
USER = {"role": "user", "content": "Create hello.txt"}


def claude_code_body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, **extra, "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.bc4; cc_entrypoint=sdk-cli;"},
        {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Use the tools."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Create hello.txt"}]},
                     {"role": "system", "content": [{"type": "text", "text": ENV,
                                                     "cache_control": {"type": "ephemeral"}}]}]}


def test_claude_codes_environment_message_joins_the_leading_system_message():
    chat = messages_api.to_chat(claude_code_body())
    assert chat["messages"] == [{"role": "system", "content": f"You are a Claude agent.\n\nUse the tools.\n\n{ENV}"},
                                USER]


def test_system_messages_in_a_conversation_keep_their_text_and_order_and_the_turns_keep_theirs():
    body = claude_code_body()
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Write", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        {"role": "system", "content": "Reminder: be brief."}]
    chat = messages_api.to_chat(body)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool"]
    assert chat["messages"][0]["content"].endswith(f"{ENV}\n\nReminder: be brief.")


def test_without_a_top_level_system_a_late_system_message_becomes_the_leading_one():
    chat = messages_api.to_chat({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hi"}, {"role": "system", "content": "Late."}]})
    assert chat["messages"] == [{"role": "system", "content": "Late."}, {"role": "user", "content": "hi"}]


def test_a_leading_system_message_alone_is_left_as_it_is():
    one = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert merge_system_messages(one) is one


def test_the_upstream_gets_one_leading_system_message(proxy, fake):
    r = httpx.post(proxy + "/v1/messages", json=claude_code_body())
    assert r.status_code == 200
    sent = fake[0].requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and sent[0]["content"].endswith(ENV)
