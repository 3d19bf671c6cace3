"""Which upstream errors mean "this server cannot do tools" (auto mode flips for good) or "it could not
parse its own model's call" (retry this request prompted; flip after a threshold). An unrelated error never
flips anything. Pure: read from the error's status and message only.
"""

from __future__ import annotations

import re
from typing import Literal

from sanctum_proxy.errors import UpstreamError

Verdict = Literal["tools_unsupported", "upstream_parse_failure"]

# Real rejection bodies: llama.cpp without --jinja (500 "tools param requires --jinja flag", its tools/server/
# server-common.cpp), Ollama ("<model> does not support tools", 400; ollama/ollama#13578), vLLM without
# --enable-auto-tool-choice, older llama.cpp ("Unsupported param: tools", ggml-org/llama.cpp#10920), and the
# generic wording other servers use; the fake upstream in tests/fakes/upstream.py sends the same bodies.
_UNSUPPORTED = re.compile(
    r"tools? param requires --jinja"
    r"|tool_choice param requires --jinja"
    r"|does not support tools"
    r"|auto\"? tool choice requires --enable-auto-tool-choice"
    r"|enable-auto-tool-choice"
    r"|unsupported param: tools"
    r"|(tools?|tool[ _]calls?|function[ _]calling|functions)\b[^.]{0,40}\b(not|isn't|is not|are not|aren't)"
    r" (supported|available|enabled|allowed)"
    r"|(does not|doesn't|do not|cannot|can't) (support|handle|use) (tools|tool[ _]calls?|function[ _]calling)"
    r"|unrecognized request argument supplied: tools"
    r"|extra inputs are not permitted[^.]{0,40}tools",
    re.IGNORECASE,
)
_PARSE_FAILURE = re.compile(
    r"does not match the expected .{0,40}format|failed to parse input at pos|invalid diff", re.IGNORECASE)


def classify(error: UpstreamError) -> Verdict | None:
    if error.upstream_status < 400:
        return None
    if _PARSE_FAILURE.search(error.message):
        return "upstream_parse_failure"
    if _UNSUPPORTED.search(error.message):
        return "tools_unsupported"
    return None
