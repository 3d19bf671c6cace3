"""Coverage-guided fuzzing of the text parsers with atheris (libFuzzer), beside the hypothesis suites.

Bytes from the fuzzer become model output (UTF-8, lossy) and go through JSON extraction, every codec and
tier 1; the first byte picks a finish_reason and whether the text is native arguments or content. Any
exception is a finding (the core promises never to raise), so is an accepted call whose arguments
jsonschema rejects. Optional: `pip install atheris` (Linux wheels for CPython 3.11).

    python bench/fuzz_atheris.py -max_total_time=300 -max_len=4096 [corpus_dir]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import jsonschema

    from sanctum_proxy.codecs.registry import find_calls
    from sanctum_proxy.core.lenient_json import decode
    from sanctum_proxy.repair.mend import assess

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.codecs.test_fuzz_parsers import BOOK, SCHEMAS  # noqa: E402

FINISH = (None, "stop", "length", "tool_calls")


def one_input(data: bytes) -> None:
    if not data:
        return
    head, text = data[0], data[1:].decode("utf-8", "replace")
    decode(text)
    find_calls(text, BOOK.name_set)
    if head & 4:
        name = sorted(SCHEMAS)[head % len(SCHEMAS)]
        message = {"tool_calls": [{"id": "c", "function": {"name": name, "arguments": text}}]}
    else:
        message = {"content": text}
    out = assess(message, BOOK, finish_reason=FINISH[head % 4], parallel_tool_calls=bool(head & 8))
    for call in (*out.calls, *out.dropped):
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
