"""The wild corpus (tests/corpus/wild/): real tool-calling outputs of local models, quoted in public issue
threads, replayed through the real proxy (default settings) against the scripted fake answering as that thread's
server answered: content, native calls, reasoning, or the server's own error status and body. Each case runs
unstreamed and streamed; a correction round the proxy asks is answered by the fake with the right call, in the
form the request asks for (native calls, the constrained JSON answer, or a prompted <tool_call>).

Per case: the right calls (names, and arguments equal as JSON) or text without calls; streamed equals unstreamed;
a case marked `local` is done in one upstream round; a correction round quotes the rejected answer and asks again.
Cases that fail today are listed in XFAIL (strict: a fix turns them into failures until the list is updated);
the rate the list implies is checked against what the run measured and printed in the terminal summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from sanctum_proxy.core import reasoning
from sanctum_proxy.repair.constrain import SCHEMA_NAME
from tests.conftest import ServerThread
from tests.fakes.upstream import FakeUpstream, Step
from tests.stream_rules import read_stream

WILD = Path(__file__).parent / "corpus" / "wild"
MODES = ("plain", "stream")
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

# Cases the proxy gets wrong today, by cause (issue 30). Keyed by case id; strict xfail.
XFAIL: dict[str, str] = {}


def load_cases() -> list[dict[str, Any]]:
    cases = [orjson.loads(p.read_bytes()) for p in sorted(WILD.glob("*.json"))]
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "case ids are unique"
    return cases


CASES = load_cases()


# --- the fake's answers --------------------------------------------------------------------------------------

def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-wild", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def message_chunks(message: dict[str, Any], finish: str) -> list[Any]:
    """A message as an upstream streams it: reasoning (under the server's own key), content, then each call
    (llama.cpp style: the head with the name, argument fragments after; Ollama's object arguments whole)."""
    out: list[Any] = [_chunk({"role": "assistant", "content": None})]
    for key in ("reasoning_content", "reasoning"):
        out += [_chunk({key: p}) for p in _pieces(message.get(key) or "")]
    out += [_chunk({"content": p}) for p in _pieces(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        if not isinstance(function.get("arguments"), str):
            out.append(_chunk({"tool_calls": [{"index": index, **call}]}))
            continue
        head = {"index": index, "id": call.get("id") or f"call_{index}", "type": "function",
                "function": {"name": function["name"]}}
        out.append(_chunk({"tool_calls": [head]}))
        out += [_chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                for p in _pieces(function["arguments"])]
    out.append(_chunk({}, finish))
    out.append({"id": "chatcmpl-wild", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [], "usage": USAGE})
    return out


def message_step(message: dict[str, Any], finish: str, stream: bool) -> Step:
    if stream:
        return Step(chunks=message_chunks(message, finish))
    return Step(body={"id": "chatcmpl-wild", "object": "chat.completion", "created": 1, "model": "m",
                      "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                   "finish_reason": finish}], "usage": USAGE})


def first_step(case: dict[str, Any], stream: bool) -> Step:
    answer = case["upstream_answer"]
    if "status" in answer:  # the server's own error, before any chunk: a JSON body either way
        body = answer["body"]
        return Step(status=answer["status"], body=body.encode() if isinstance(body, str) else body)
    return message_step(answer["message"], answer.get("finish_reason", "stop"), stream)


def right_answer(case: dict[str, Any], request: dict[str, Any]) -> Step:
    """The fake's answer to a round after the first: the right call(s), in the form the request asks for."""
    calls = case["expected"].get("calls") or []
    stream = bool(request.get("stream"))
    if not calls:
        return message_step({"content": case["expected"].get("content") or "No tool is needed."}, "stop", stream)
    fmt = request.get("response_format") or {}
    if fmt.get("type") == "json_schema" and fmt.get("json_schema", {}).get("name") == SCHEMA_NAME:
        one = [{"name": c["name"], "arguments": c["arguments"]} for c in calls]
        text = orjson.dumps(one[0] if len(one) == 1 else {"tool_calls": one}).decode()
        return message_step({"content": text}, "stop", stream)
    if not request.get("tools"):  # prompted: the Hermes form the proxy asks for by default
        text = "\n".join("<tool_call>\n" + orjson.dumps({"name": c["name"], "arguments": c["arguments"]}).decode()
                         + "\n</tool_call>" for c in calls)
        return message_step({"content": text}, "stop", stream)
    native = [{"id": f"call_right{i}", "type": "function",
               "function": {"name": c["name"], "arguments": orjson.dumps(c["arguments"]).decode()}}
              for i, c in enumerate(calls)]
    return message_step({"content": "", "tool_calls": native}, "tool_calls", stream)


# --- running a case ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeUpstream, str]]:
    """One fake and one proxy for the module: each case and mode uses a model name of its own, so what auto mode
    learns (an upstream parse failure counted, a flip to prompted) never carries over to another case."""
    upstream = FakeUpstream()
    with ServerThread(upstream.app()) as up, ServerThread(create_app(load_settings(
            {"upstream": up.url + "/v1", "traces_path": ":memory:"}))) as proxy:
        yield upstream, proxy.url


def ask(proxy: str, case: dict[str, Any], mode: str) -> tuple[int, dict[str, Any]]:
    """One client request; the outcome as {calls, content, rounds, error} whichever way it came."""
    body = {"model": f"{case['id']}/{mode}", "messages": case.get("messages") or [
        {"role": "user", "content": case.get("prompt") or "Go."}], "tools": case["tools"],
        "stream": mode == "stream"}
    with httpx.Client(timeout=30) as client:
        if mode == "plain":
            r = client.post(proxy + "/v1/chat/completions", json=body)
            data = r.json()
            if r.status_code != 200:
                return r.status_code, {"error": data.get("error"), "calls": [], "content": ""}
            message = data["choices"][0]["message"]
            calls = [{"name": c["function"]["name"], "arguments": orjson.loads(c["function"]["arguments"])}
                     for c in message.get("tool_calls") or []]
            return 200, {"calls": calls, "content": message.get("content") or "",
                         "rounds": data["sanctum"]["rounds"], "finish": data["choices"][0]["finish_reason"]}
        with client.stream("POST", proxy + "/v1/chat/completions", json=body) as r:
            raw = r.read()
        if r.status_code != 200:
            return r.status_code, {"error": orjson.loads(raw).get("error"), "calls": [], "content": ""}
        got = read_stream(raw)
        if got.error is not None:
            return 200, {"error": got.error, "calls": [], "content": got.content}
        return 200, {"calls": got.parsed_calls(), "content": got.content,
                     "rounds": got.sanctum["rounds"] if got.sanctum else None, "finish": got.finish_reason}


# What each server answers the proxy's capability probe (upstreams/capabilities.py): llama.cpp's GET /props
# (the template's caps), Ollama's POST /api/show (its capability list); vLLM and LM Studio answer neither.
PROPS = {"chat_template_caps": {"supports_tools": True, "supports_tool_calls": True,
                                "supports_parallel_tool_calls": True}, "chat_template": ""}
SHOW = {"capabilities": ["completion", "tools"], "template": "", "details": {"format": "gguf"}}


def replay(servers: tuple[FakeUpstream, str], case: dict[str, Any], mode: str) -> tuple[int, dict[str, Any],
                                                                                         list[dict[str, Any]]]:
    fake, proxy = servers
    fake.steps.clear()
    fake.props = PROPS if case["server"] == "llama.cpp" else None
    fake.show = SHOW if case["server"] == "ollama" else None
    seen = len(fake.requests)
    fake.push(first_step(case, mode == "stream"))
    fake.responder = lambda request: right_answer(case, request)
    try:
        status, out = ask(proxy, case, mode)
    finally:
        fake.responder = None
    return status, out, fake.requests[seen:]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def check_rounds(case: dict[str, Any], requests: list[dict[str, Any]]) -> None:
    """What the proxy asked in a round after the first. A correction quotes the rejected answer (an assistant
    turn) and ends with the correction; a re-ask (after an upstream error, or an answer the server emptied) sends
    the conversation again, the tools listed (natively or in a prompted system turn), nothing to quote."""
    if len(requests) < 2:
        return
    first = requests[0]["messages"]
    for later in requests[1:]:
        messages = later["messages"]
        tail = messages[len(first) + (1 if messages[0]["role"] == "system" and first[0]["role"] != "system"
                                      else 0):]
        if not tail:  # a re-ask: the same conversation, the tools still offered
            assert messages[-1] == first[-1], "a re-ask that is not the client's conversation"
            wanted = {c["name"] for c in case["expected"].get("calls") or []} or {
                t["function"]["name"] for t in case["tools"]}
            listed = later.get("tools") or [m for m in messages if m["role"] == "system"
                                            and all(name in _text(m.get("content")) for name in wanted)]
            assert listed, "a re-ask without the tools"
            continue
        roles = [m["role"] for m in tail]
        assert "assistant" in roles, f"the correction round does not quote the rejected answer: {roles}"
        quoted = next(m for m in tail if m["role"] == "assistant")
        assert _text(quoted.get("content")).strip() or quoted.get("tool_calls"), "the rejected answer quoted empty"
        assert tail[-1]["role"] in ("user", "tool") and _text(tail[-1].get("content")).strip(), \
            "the correction round ends without a correction"


def outcome(case: dict[str, Any], status: int, out: dict[str, Any], requests: list[dict[str, Any]]) -> str | None:
    """None when right, else what went wrong (one line)."""
    expected = case["expected"]
    calls = expected.get("calls") or []
    if status != 200 or out.get("error"):
        return f"error {status}: {str(out.get('error'))[:160]}"
    if out["calls"] != calls:
        if not out["calls"]:
            return f"no call (content {out['content'][:100]!r})"
        kind = "phantom" if not calls else "wrong"
        return f"{kind} call: {out['calls']}"
    if not calls:
        if "content" in expected and out["content"].strip() != expected["content"].strip():
            return f"content differs: {out['content'][:120]!r}"
        if "content" not in expected and not out["content"].strip():
            return "text answer dropped"
    else:
        stray = _STRAY.search(_outside_reasoning(out["content"]))
        if stray:
            return f"call text left in content: {out['content'][:120]!r}"
    if expected.get("local") and len(requests) > 1:
        return f"{len(requests)} rounds where the output holds the answer (expected a local mend)"
    return None


# Call markup that must not reach the client beside a call read from it.
_STRAY = re.compile(r"<tool_call>|</tool_call>|\[TOOL_CALLS\]|<\|python_tag\|>|<function=|\"arguments\"\s*:"
                    r"|\"parameters\"\s*:|to=functions\.|<\|channel\|>|<｜tool|<\|tool_call"
                    r"|\[TOOL_REQUEST\]|\[END_TOOL_REQUEST\]|<functioncall|<tool_call\|>")


def _outside_reasoning(content: str) -> str:
    """The content less its `<think>` blocks: reasoning stays in content as sent (docs/contract.md, reasoning
    markup; `reasoning_format = "keep"`), and a call the model planned there is its thinking, not leftover markup."""
    return "".join(content[a:b] for a, b in reasoning.outside(content))

RESULTS: dict[tuple[str, str], str | None] = {}


def _params() -> list[Any]:
    out = []
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[case["id"]])] if case["id"] in XFAIL else []
        out.append(pytest.param(case, id=case["id"], marks=marks))
    return out


@pytest.mark.parametrize("case", _params())
def test_wild_case(servers: tuple[FakeUpstream, str], case: dict[str, Any]) -> None:
    results = {}
    for mode in MODES:
        status, out, requests = replay(servers, case, mode)
        verdict = outcome(case, status, out, requests)
        if verdict is None:
            try:
                check_rounds(case, requests)
            except AssertionError as exc:
                verdict = f"round asked wrongly: {exc}"
        results[mode] = (out, verdict)
    (plain, plain_verdict), (stream, stream_verdict) = results["plain"], results["stream"]
    if plain_verdict is None and stream_verdict is None:
        for key in ("calls", "content", "rounds"):
            got, want = stream[key], plain[key]
            if key == "content":
                got, want = got.strip(), want.strip()
            if got != want:
                stream_verdict = f"streamed {key} differ from unstreamed: {got!r} vs {want!r}"
                break
    RESULTS[case["id"], "plain"], RESULTS[case["id"], "stream"] = plain_verdict, stream_verdict
    assert plain_verdict is None, f"unstreamed: {plain_verdict}"
    assert stream_verdict is None, f"streamed: {stream_verdict}"


def expected_rate() -> float:
    return 1 - len([c for c in CASES if c["id"] in XFAIL]) / len(CASES)


def test_the_rate_the_xfail_list_implies_is_the_measured_one(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the cases (definition order): the share right in both modes equals what XFAIL implies, and is
    reported at the end of the run."""
    assert set(XFAIL) <= {c["id"] for c in CASES}, "XFAIL names a case that is not in the corpus"
    if len(RESULTS) != 2 * len(CASES):
        pytest.skip("only a part of the corpus ran")
    right = {m: sum(RESULTS[c["id"], m] is None for c in CASES) for m in MODES}
    both = sum(RESULTS[c["id"], "plain"] is None and RESULTS[c["id"], "stream"] is None for c in CASES)
    line = (f"wild corpus: {both}/{len(CASES)} right ({both / len(CASES):.1%}); unstreamed "
            f"{right['plain']}/{len(CASES)}, streamed {right['stream']}/{len(CASES)}")
    with capsys.disabled():  # shown in the run's output, not only in a captured section
        print("\n" + line)
    assert both / len(CASES) == pytest.approx(expected_rate()), line

