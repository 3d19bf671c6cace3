"""One leading system message, for templates that allow one only at the start (Qwen3's): agents send several."""

from __future__ import annotations

from sanctum_proxy.core.shapes import ChatMessage, JSONValue

INSTRUCTION_ROLES = ("system", "developer")


def merge_system_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """`messages` with the system and developer texts joined, in order, into one leading message."""
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
