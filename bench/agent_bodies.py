"""The agents' real requests as benchmark bodies (tests/data/agent_requests), a 40-turn conversation grown from
one of them, and bodies of a chosen size: every body bytes, `stream` set as the row asks.

Chat completions bodies are what the upstream got (Claude Code, Codex: the proxy's translation of their own
requests) or what the agent sent (opencode, Qwen Code, goose: chat clients); the agents' own Messages and
Responses bodies are kept for the proxy's own endpoints.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "agent_requests"
MODEL = "bench-model"
CHAT_AGENTS = ("qwen-code", "opencode", "goose")  # chat clients: their own body is the chat body
TRANSLATED = {"claude-code": "/messages", "codex": "/responses"}


@dataclass(frozen=True)
class Body:
    """One row's request: its name, the path it is posted to and its bytes, plain and streamed."""

    name: str
    path: str
    plain: bytes
    stream: bytes
    tools: int

    @property
    def kb(self) -> float:
        return len(self.plain) / 1000


def encode(body: dict[str, Any], stream: bool) -> bytes:
    body = {**body, "model": MODEL, "stream": stream}
    body.pop("stream_options", None)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def make(name: str, path: str, body: dict[str, Any]) -> Body:
    return Body(name, path, encode(body, False), encode(body, True), len(body.get("tools") or []))


def chat_turn(agent: str, turn: int = -1) -> dict[str, Any]:
    """One agent's chat completions body: a chat client's own request, else what the proxy sent upstream."""
    record = json.loads((DATA / f"{agent}.json").read_text(encoding="utf-8"))
    if "upstream" not in record:  # a chat client's file holds its body alone
        return record  # type: ignore[no-any-return]
    return record["upstream"][turn]  # type: ignore[no-any-return]


def client_turn(agent: str, turn: int = -1) -> dict[str, Any]:
    return json.loads((DATA / f"{agent}.json").read_text(encoding="utf-8"))["client"][turn]  # type: ignore[no-any-return]


def available() -> list[str]:
    return [a for a in (*CHAT_AGENTS, *TRANSLATED) if (DATA / f"{a}.json").is_file()]


def tool_round(tool: dict[str, Any], number: int, size: int) -> list[dict[str, Any]]:
    """One tool round: the assistant's call of `tool` and its result of about `size` bytes (a file read)."""
    name = tool["function"]["name"]
    call_id = f"call_{number:04d}"
    line = f"{number:4d}  def handler_{number}(request):  # returns the parsed payload of the request\n"
    result = (line * (size // len(line) + 1))[:size]
    return [{"role": "assistant", "content": f"Looking at part {number}.",
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": name, "arguments": json.dumps({"path": f"src/m{number}.py"})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result}]


def grown(body: dict[str, Any], rounds: int, size: int = 1500) -> dict[str, Any]:
    """`body` after `rounds` more tool rounds of `size`-byte results: the same agent later in its task."""
    body = copy.deepcopy(body)
    tool = body["tools"][0]
    for number in range(rounds):
        body["messages"] += tool_round(tool, number, size)
    body["messages"].append({"role": "user", "content": "Now fix the failing test."})
    return body


def sized(body: dict[str, Any], kb: float) -> dict[str, Any]:
    """`body`'s first user turn grown by tool rounds of 1.5 KB to about `kb` KB, with one small tool: the
    size is all conversation."""
    from canned_upstream import TOOLS

    target = int(kb * 1000)
    out = {"model": MODEL, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
           "tools": TOOLS}
    number = 0
    while len(encode(out, False)) < target - 1700:
        out["messages"][-1:-1] = tool_round(TOOLS[0], number, 1500)
        number += 1
    gap = target - len(encode(out, False))
    if gap > 0:
        out["messages"][-1]["content"] += " " + "x" * max(gap - 2, 0)
    return out


def turn_rows(agent: str, counts: tuple[int, ...] = (0, 10, 20, 40, 80)) -> list[Body]:
    """One agent's turn after more and more tool rounds: the cost against the turn count."""
    return [make(f"{agent} + {n} rounds", "/chat/completions", grown(chat_turn(agent), n)) for n in counts]


def agent_rows() -> list[Body]:
    """Each agent's latest captured turn as a chat body, plus a 40-turn conversation of the first agent."""
    rows = []
    for agent in available():
        body = chat_turn(agent)
        rows.append(make(f"{agent} turn", "/chat/completions", body))
    first = available()[0]
    rows.append(make(f"{first} after 40 tool rounds", "/chat/completions", grown(chat_turn(first), 40)))
    return rows


def translated_rows() -> list[Body]:
    """The agents' own Messages and Responses bodies, for the proxy's own endpoints."""
    return [make(f"{agent} turn ({path[1:]})", path, client_turn(agent))
            for agent, path in TRANSLATED.items() if (DATA / f"{agent}.json").is_file()]


def size_rows(sizes: tuple[float, ...] = (1, 10, 30, 66, 200)) -> list[Body]:
    """One-tool conversations of the given sizes: the cost against body size."""
    return [make(f"{kb:g} KB", "/chat/completions", sized({}, kb)) for kb in sizes]
