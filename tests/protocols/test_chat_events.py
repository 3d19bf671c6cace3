"""The chat SSE writer (protocols/chat_events.SseWriter) on its own: the loop's events in, the exact bytes a client
reads out (docs/contract.md section 6). The same writer through the proxy is tests/test_streaming_proxy.py."""

from __future__ import annotations

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Problem
from sanctum_proxy.errors import UpstreamUnreachable
from sanctum_proxy.protocols.chat_events import ChoicesWriter, SseWriter
from sanctum_proxy.repair.events import ContentDelta, Final
from sanctum_proxy.routes.choices import Finals

HEAD = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'


def writer(**options: object) -> SseWriter:
    return SseWriter({"id": "c", "created": 1, "model": "m"}, "t", **options)  # type: ignore[arg-type]


def test_content_then_calls_then_finish_usage_and_done() -> None:
    w = writer(include_usage=True)
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    final = Final({"role": "assistant", "content": "Hello world", "tool_calls": [call]}, "tool_calls",
                  {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}, "native", 1, [], {}, "clean")
    out = b"".join([w.opening(), *w.render(ContentDelta("Hello ")), *w.render(ContentDelta("world")),
                    *w.render(final)])
    assert out == (
        HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
        + HEAD + b'{"content":"Hello"},"finish_reason":null}]}\n\n'  # the trailing space waits for more text
        + HEAD + b'{"content":" world"},"finish_reason":null}]}\n\n'
        + HEAD + b'{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f",'
                 b'"arguments":""}}]},"finish_reason":null}]}\n\n'
        + HEAD + b'{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\":1}"}}]},"finish_reason":null}]}\n\n'
        + HEAD + b'{},"finish_reason":"tool_calls"}]}\n\n'
        + b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
          b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},'
          b'"sanctum":{"mode":"native","rounds":1,"omens":[],"trace_id":"t"}}\n\n'
        + b"data: [DONE]\n\n")


def test_a_stream_of_hidden_rounds_only_carries_the_accepted_rounds_id_and_fingerprint() -> None:
    w = writer()
    meta = {"id": "chatcmpl-up", "created": 7, "model": "up", "system_fingerprint": "b6000-abc"}
    final = Final({"role": "assistant", "content": "Hi"}, "stop", None, "native", 2, [], meta, "repaired")  # type: ignore[arg-type]
    chunks = [orjson.loads(line[6:]) for line in b"".join(w.render(final)).split(b"\n\n") if line[6:7] == b"{"]
    assert len(chunks) == 3 and {(c["id"], c["created"], c["model"], c["system_fingerprint"]) for c in chunks} == {
        ("chatcmpl-up", 7, "up", "b6000-abc")}


def test_an_omen_waits_for_the_next_event_and_an_error_ends_the_stream() -> None:
    w = writer()
    omen = om.rejected(1, Problem("invalid_arguments", "f", ("a is required",), "{}"), "fix a")
    assert b"".join(w.render(ContentDelta("Hi"))).endswith(HEAD + b'{"content":"Hi"},"finish_reason":null}]}\n\n')
    assert w.render(omen) == []
    assert w.render(ContentDelta(" there")) == [
        b': omen {"type":"SpellCallRejected","round":1,"spell":"f","reason":"invalid_arguments",'
        b'"details":["a is required"],"correction":"fix a","raw":"{}"}\n\n',
        HEAD + b'{"content":" there"},"finish_reason":null}]}\n\n']
    assert w.render(UpstreamUnreachable("upstream unreachable: gone")) == [
        b'data: {"error":{"message":"upstream unreachable: gone","type":"upstream_unreachable","param":null,'
        b'"code":"upstream_unreachable"}}\n\n']
    assert w.ended


def test_several_choices_close_with_the_last_finish_chunk_then_one_usage_chunk_by_choice_0() -> None:
    w = ChoicesWriter({"id": "c", "created": 1, "model": "m"}, "t", omen_style="comments", include_usage=True,
                      legacy=False)
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    first = Final({"role": "assistant", "content": "A"}, "stop", usage, "native", 1, [], {}, "clean")
    second = Final({"role": "assistant", "content": "B"}, "length", None, "native", 1, [], {}, "clean")
    out = [*w.render((0, ContentDelta("A"))), *w.render((1, ContentDelta("B"))), *w.render((0, first)),
           *w.render((1, second)), *w.render(Finals.of([first, second]))]
    head_1 = HEAD.replace(b'"choices":[{"index":0,', b'"choices":[{"index":1,')  # choice 1's chunks
    assert out == [
        HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
        + HEAD + b'{"content":"A"},"finish_reason":null}]}\n\n',
        head_1 + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
        + head_1 + b'{"content":"B"},"finish_reason":null}]}\n\n',
        HEAD + b'{},"finish_reason":"stop"}]}\n\n',  # choice 0's finish chunk goes out when choice 1's ends
        head_1 + b'{},"finish_reason":"length"}]}\n\n',
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},'
        b'"sanctum":{"mode":"native","rounds":1,"omens":[],"trace_id":"t"}}\n\n',
        b"data: [DONE]\n\n"]
    assert w.ended


def test_split_reasoning_logprobs_go_on_the_first_piece_and_a_partial_marker_waits_for_the_end() -> None:
    # reasoning_format "split": the chat writer's live text is protocols/reply.LiveText, as the other writers'
    w = writer(split_reasoning=True)

    def lp(token: str) -> dict[str, object]:
        return {"content": [{"token": token, "logprob": -0.5, "bytes": None, "top_logprobs": []}]}

    def tokens(*names: str) -> bytes:
        return b',"logprobs":{"content":[' + b",".join(
            b'{"token":' + orjson.dumps(n) + b',"logprob":-0.5,"bytes":null,"top_logprobs":[]}' for n in names) + b"]}"

    pieces = ["<think>Why", " ", "not</think>\n\nSo", " it <thi"]
    out = [w.render(ContentDelta(p, logprobs=lp(p))) for p in pieces]
    final = Final({"role": "assistant", "content": "<think>Why not</think>\n\nSo it <thi"}, "stop", None, "native",
                  1, [], {}, "clean")
    out.append(w.render(final))
    assert out == [
        [HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
         + HEAD + b'{"reasoning_content":"Why"},"finish_reason":null' + tokens("<think>Why") + b"}]}\n\n"],
        [],  # whitespace waits for the text after it, with its logprobs
        [HEAD + b'{"reasoning_content":" not"},"finish_reason":null'
         + tokens(" ", "not</think>\n\nSo") + b"}]}\n\n"
         + HEAD + b'{"content":"So"},"finish_reason":null}]}\n\n'],
        [HEAD + b'{"content":" it "},"finish_reason":null' + tokens(" it <thi") + b"}]}\n\n"],
        [HEAD + b'{"content":"<thi"},"finish_reason":null}]}\n\n',  # the partial marker was text after all
         HEAD + b'{},"finish_reason":"stop"}],"sanctum":{"mode":"native","rounds":1,"omens":[],"trace_id":"t"}}\n\n',
         b"data: [DONE]\n\n"]]
