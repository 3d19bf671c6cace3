"""Prompt tokens of the coding agents' real requests (tests/data/agent_requests/<agent>.json) per way of offering
their tools: the agent's text alone, a tool-aware chat template's rendering of the tools (the template
llama-server is started with, Qwen 2.5's in the results), and the proxy's prompted mode with each tool's schema
in full (`before`) and compact (`after`, repair/prompted.compact_schema). Claude Code's Messages and Codex's
Responses request are read through the proxy's own translation to a chat body.

Every variant is rendered by llama-server's POST /apply-template and counted by its POST /tokenize, so each is
counted with one tokenizer and framed by one template:

    llama-server -m MODEL.gguf --jinja --chat-template-file qwen2.5.jinja --port 8080
    python bench/prompt_tokens.py --server http://127.0.0.1:8080

Without --server the counts are estimates (characters / 4) of the texts alone, and the template column is empty.
Writes bench/results/prompt_tokens.md (not with --quick).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any
from unittest import mock

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sanctum_proxy.core.calls import Tool, content_text  # noqa: E402
from sanctum_proxy.protocols import messages_api, responses_request  # noqa: E402
from sanctum_proxy.repair import prompted  # noqa: E402
from sanctum_proxy.repair.toolbox import Toolbox  # noqa: E402

REQUESTS = ROOT / "tests" / "data" / "agent_requests"
RESULTS = ROOT / "bench" / "results" / "prompt_tokens.md"
TRANSLATED = {"/v1/messages": messages_api.to_chat, "/v1/responses": responses_request.to_chat}


class Counter:
    """Tokens of a chat request: llama-server's template and tokenizer, or an estimate."""

    def __init__(self, server: str | None) -> None:
        self.server = server.rstrip("/") if server else None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(f"{self.server}{path}", data=orjson.dumps(body),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.load(answer)

    def tokens(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int | None:
        if self.server is None:
            if tools:
                return None
            return sum(len(content_text(m.get("content"))) for m in messages) // 4
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        prompt = self._post("/apply-template", body)["prompt"]
        return len(self._post("/tokenize", {"content": prompt})["tokens"])


def flat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with text content (a template concatenates strings; agents send lists of text parts)."""
    return [{**m, "content": content_text(m.get("content"))} for m in messages]


def book(tools: list[dict[str, Any]]) -> Toolbox:
    functions = [t.get("function") or {} for t in tools]
    return Toolbox([Tool(f["name"], f.get("description") or "", f.get("parameters") or {}) for f in functions])


def full_schema(parameters: Any) -> str:
    """The rendering before compact_schema: the schema as the client sent it."""
    return orjson.dumps(parameters or {"type": "object", "properties": {}}).decode()


def chat_body(captured: dict[str, Any]) -> dict[str, Any]:
    """The chat body of a captured request: as sent, or the agent's first request as the proxy translates it."""
    if "endpoint" not in captured:
        return captured
    return TRANSLATED[captured["endpoint"]](captured["client"][0])


def measure(counter: Counter, request: dict[str, Any]) -> dict[str, Any]:
    messages, tools = flat(request["messages"]), request["tools"]
    body = {"messages": messages, "tools": tools}
    after = prompted.to_prompted(body, book(tools), "hermes")["messages"]
    with mock.patch.object(prompted, "_schema_text", full_schema):
        before = prompted.to_prompted(body, book(tools), "hermes")["messages"]
    return {"tools": len(tools), "tools_bytes": len(orjson.dumps(tools)), "own": counter.tokens(messages),
            "template": counter.tokens(messages, tools), "before": counter.tokens(flat(before)),
            "after": counter.tokens(flat(after))}


def table(rows: dict[str, dict[str, Any]]) -> str:
    def cell(row: dict[str, Any], key: str) -> str:
        value = row[key]
        if value is None:
            return "-"
        return f"{value:,}" if key == "own" else f"{value:,} (+{value - row['own']:,})"

    lines = ["| agent | tools (JSON bytes) | agent's text alone | tool-aware template | prompted, full schemas "
             "| prompted, compact |", "|---|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['tools']} ({row['tools_bytes']:,}) | " +
                     " | ".join(cell(row, k) for k in ("own", "template", "before", "after")) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="llama-server base URL (its /apply-template and /tokenize)")
    parser.add_argument("--quick", action="store_true", help="print only; do not write the results file")
    args = parser.parse_args(argv)
    counter = Counter(args.server)
    paths = sorted(REQUESTS.glob("*.json"))
    rows = {path.stem: measure(counter, chat_body(json.loads(path.read_text()))) for path in paths}
    how = ("llama-server /apply-template + /tokenize" if args.server else "estimate: characters / 4, no template")
    text = table(rows)
    print(f"tokens ({how})\n{text}")
    if not args.quick:
        RESULTS.write_text(f"# Prompt tokens of the coding agents' requests\n\n`python bench/prompt_tokens.py "
                           f"{'--server URL' if args.server else ''}`; tokens: {how}.\n\n{text}\n")


if __name__ == "__main__":
    main()
