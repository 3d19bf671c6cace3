"""merge_system_messages: one leading system message for chat templates that allow no other (Qwen3's raise
"System message must be at the beginning"), from Codex's two developer messages or Claude Code's late system."""

from __future__ import annotations

from sanctum_proxy.protocols.system_messages import merge_system_messages

USER = {"role": "user", "content": "Hi"}
ASSISTANT = {"role": "assistant", "content": "Hello."}


def test_codex_two_developer_messages_become_one_leading_system_message():
    messages = [{"role": "developer", "content": "You are Codex."}, {"role": "developer", "content": "Skills."},
                USER]
    assert merge_system_messages(messages) == [{"role": "system", "content": "You are Codex.\n\nSkills."}, USER]


def test_a_system_message_after_the_first_user_turn_joins_the_leading_one_in_order():
    messages = [{"role": "system", "content": "Be brief."}, USER, ASSISTANT,
                {"role": "system", "content": [{"type": "text", "text": "Reminder: "},
                                               {"type": "text", "text": "tests"}]}, USER]
    assert merge_system_messages(messages) == [
        {"role": "system", "content": "Be brief.\n\nReminder: tests"}, USER, ASSISTANT, USER]


def test_a_late_system_message_without_a_leading_one_moves_to_the_start():
    assert merge_system_messages([USER, {"role": "developer", "content": "Late."}]) == [
        {"role": "system", "content": "Late."}, USER]


def test_messages_already_fit_are_returned_as_they_are():
    one = [{"role": "system", "content": "Be brief.", "name": "x"}, USER]
    assert merge_system_messages(one) is one
    assert merge_system_messages([USER, ASSISTANT]) == [USER, ASSISTANT]
    assert merge_system_messages([]) == []


def test_empty_instructions_leave_no_blank_lines():
    messages = [{"role": "system", "content": ""}, {"role": "developer", "content": None}, USER,
                {"role": "developer", "content": "Only this."}]
    assert merge_system_messages(messages) == [{"role": "system", "content": "Only this."}, USER]
