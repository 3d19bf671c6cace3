"""The peers' corpus (tests/corpus/peers/cases.json): the model outputs vLLM's and SGLang's own parser tests feed
their parsers, each with the calls and the content those tests expect. Every case is read whole (`assess`, as a
non-streamed answer) and streamed (fed to the Assembler in 1- and 3-character deltas, as routes/sse.py feeds it);
right means the same calls locally (no tier-2 problem), the expected content and no call markup left in it.
Cases that fail today are in XFAIL (strict); the score is printed at the end of the run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sanctum_proxy.core import reasoning
from sanctum_proxy.protocols.reply import rest_after
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.streaming import Assembler, with_tools
from sanctum_proxy.repair.toolbox import Toolbox

PEERS = Path(__file__).parents[1] / "corpus" / "peers" / "cases.json"
CASES: list[dict[str, Any]] = json.loads(PEERS.read_text(encoding="utf-8"))["cases"]
MODES = {"whole": None, "1char": 1, "3char": 3}

# Cases the proxy gets wrong today: case id -> why. Strict: a fix turns an entry into a failure.
XFAIL: dict[str, str] = {}

# Call markup of any format the corpus holds: none may reach the client beside (or instead of) a call read.
STRAY = re.compile(
    r"<tool_calls?>|</tool_calls?>|\[TOOL_CALLS\]|\[/TOOL_CALLS\]|\[CALL_ID\]|\[ARGS\]|<\|python_tag\|>"
    r"|<\|python_start\|>|<\|python_end\|>|<function=|<function_calls>|</function_calls>|<function_call>"
    r"|\"arguments\"\s*:|\"parameters\"\s*:|to=functions\.|<\|channel\|>|<｜tool|<\|tool_call|<\|action_start\|>"
    r"|<\|plugin\|>|<\|action_end\|>|<longcat_tool_call>|</longcat_tool_call>|<TOOLCALL>|</TOOLCALL>"
    r"|<\|tools_prefix\|>|<\|tools_suffix\|>|<\|function_call\|>|function call<\|role_sep\|>|<\|message_sep\|>"
    r"|<steptml:|</steptml:|<\|tool_calls_section|<\|tool_call_begin\|>|<minimax:|<invoke |<parameter |<param "
    r"|<function name=|<seed:tool_call>|<arg_key>|<\|start\|>|<\|constrain\|>|<\|call\|>|BEGIN_ARG|END_ARG"
    r"|<start_function_call>|<end_function_call>|<\|tool▁")


def tools_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The case's tools: full OpenAI tools, or bare names offered with the expected calls' keys as untyped
    parameters (the peers' tests offer no schema: no value is typed by one)."""
    keys: dict[str, dict[str, Any]] = {}
    for call in case["expect"]["calls"]:
        keys.setdefault(call["name"], {}).update(dict.fromkeys(call["arguments"], {}))
    return [t if isinstance(t, dict) else {"type": "function", "function": {
        "name": t, "parameters": {"type": "object", "properties": keys.get(t, {})}}} for t in case["tools"]]


def _chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def read(case: dict[str, Any], size: int | None) -> tuple[list[dict[str, Any]], list[str], str]:
    """(calls, tier-2 problems, content the client ends with), whole or streamed in deltas of `size`."""
    book = Toolbox.from_tools(tools_of(case))
    text = case["output"]
    if size is None:
        out = assess({"role": "assistant", "content": text}, book, finish_reason="stop")
        shown = out.content or ""
    else:
        names = book.name_set
        assembler = Assembler(starts=with_tools(names), names=names)
        live = "".join(assembler.feed(_chunk(text[i:i + size])) for i in range(0, len(text), size))
        assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        out = assess(assembler.message(), book, finish_reason="stop")
        shown = live + rest_after(live, "", out.content or "")  # as the SSE writer ends a round
    calls = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in out.calls]
    return calls, [p.reason for p in out.problems], shown


def verdict(case: dict[str, Any], size: int | None) -> str | None:
    """None when right, else one of: missed, wrong, phantom, corrected (tier 2), content, markup."""
    calls, problems, content = read(case, size)
    want = case["expect"]["calls"]
    if calls != want:
        kind = "missed" if not calls else "phantom" if not want else "wrong"
        return f"{kind}: {calls} {problems}"
    if problems:
        return f"corrected: {problems}"
    visible = "".join(content[a:b] for a, b in reasoning.outside(content))
    if want and STRAY.search(visible):
        return f"markup: {content!r}"
    if content.strip() != (case["expect"]["content"] or "").strip():
        return f"content: {content!r}"
    return None


RESULTS: dict[tuple[str, str], str | None] = {}


def _params() -> list[Any]:
    return [pytest.param(c, id=c["id"], marks=[pytest.mark.xfail(strict=True, reason=XFAIL[c["id"]])]
                         if c["id"] in XFAIL else []) for c in CASES]


def test_case_ids_are_unique_and_name_their_source() -> None:
    assert len({c["id"] for c in CASES}) == len(CASES)
    for c in CASES:
        assert c["source"]["repo"] in ("vllm-project/vllm", "sgl-project/sglang") and c["source"]["test"], c["id"]


@pytest.mark.parametrize("case", _params())
def test_peer_case(case: dict[str, Any]) -> None:
    results = {mode: verdict(case, size) for mode, size in MODES.items()}
    for mode, got in results.items():
        RESULTS[case["id"], mode] = got
    assert results == dict.fromkeys(MODES), results


def test_the_score_is_the_one_xfail_implies(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the cases: the share right in every mode, printed, equals what XFAIL implies."""
    if len(RESULTS) != len(MODES) * len(CASES):
        pytest.skip("only a part of the corpus ran")
    right = {m: sum(RESULTS[c["id"], m] is None for c in CASES) for m in MODES}
    kinds = [str(v).split(":")[0] for v in RESULTS.values() if v is not None]
    counts = {k: kinds.count(k) for k in sorted(set(kinds))}
    line = (f"peers corpus: {len(CASES)} cases; right whole {right['whole']}, streamed 1-char {right['1char']}, "
            f"3-char {right['3char']}; failures by kind {counts}")
    with capsys.disabled():
        print("\n" + line)
    assert right["whole"] == len(CASES) - len(XFAIL), line
