"""One leading system message: what chat templates that allow a system message only at the start need (Qwen3's
raise "System message must be at the beginning", gpt-oss's take one). Pure: no I/O.

Codex sends its instructions as two `developer` messages; Claude Code sends a `system` message after the first
user turn; llama.cpp reads `developer` as `system`. `merge_system_messages` keeps every other message where it
is and puts the text of every system and developer message, in order, into one system message at the start.
"""

from __future__ import annotations

from sanctum_proxy.core.shapes import ChatMessage, JSONValue

INSTRUCTION_ROLES = ("system", "developer")


def merge_system_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """`messages` with one leading system message: the texts of the system and developer messages, in order,
    joined by a blank line (content parts' text joined). Unchanged when there is at most one such message and
    it is a leading `system` one (or there is none)."""
    instructions = [m for m in messages if m.get("role") in INSTRUCTION_ROLES]
    if not instructions or (len(instructions) == 1 and messages[0] is instructions[0]
                            and messages[0].get("role") == "system"):
        return messages
    texts = [text for text in (_text(m.get("content")) for m in instructions) if text]
    rest = [m for m in messages if m.get("role") not in INSTRUCTION_ROLES]
    return [{"role": "system", "content": "\n\n".join(texts)}, *rest]


def _text(content: JSONValue) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""
