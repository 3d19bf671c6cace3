"""Time tier 1 (`assess`) per call: a valid native call and a typical malformed one (Hermes markup in
content with single quotes and a trailing comma), against plain `json.loads` of the same arguments.

    python bench/bench_repair.py [--quick]

Prints microseconds per call and writes bench/results/repair.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.toolbox import Toolbox

RESULTS = Path(__file__).parent / "results" / "repair.md"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
]
VALID_ARGS = '{"city": "Paris", "unit": "celsius", "days": 3}'
MALFORMED_ARGS = "{'city': 'Paris', 'unit': 'celsius', 'days': 3,}"
VALID = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": VALID_ARGS}}
    ],
}
MALFORMED = {
    "role": "assistant",
    "content": (
        "I'll check the weather.\n<tool_call>\n{'name': 'get_weather', 'arguments': "
        + MALFORMED_ARGS
        + "}\n</tool_call>"
    ),
}


def per_call_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    number, repeat = (500, 3) if args.quick else (5000, 7)
    book = Toolbox.from_tools(TOOLS)
    ids = iter(range(10**9))

    def new_id() -> str:
        return f"call_{next(ids)}"

    out = assess(MALFORMED, book, new_id=new_id)
    assert out.ok and json.loads(out.calls[0].arguments) == json.loads(VALID_ARGS), out
    assert assess(VALID, book).calls[0].arguments == VALID_ARGS
    baseline = per_call_us(lambda: json.loads(VALID_ARGS), number, repeat)
    rows = [
        ("json.loads of the valid arguments (baseline)", baseline),
        (
            "assess: valid native call",
            per_call_us(lambda: assess(VALID, book, new_id=new_id), number, repeat),
        ),
        (
            "assess: hermes in content, single quotes + trailing comma",
            per_call_us(lambda: assess(MALFORMED, book, new_id=new_id), number, repeat),
        ),
    ]
    lines = [
        "# Tier-1 repair timings",
        "",
        f"`python bench/bench_repair.py{' --quick' if args.quick else ''}` on Python "
        f"{platform.python_version()}, {platform.machine()}; best of {repeat} x {number} calls.",
        "",
        "| case | µs per call | × json.loads |",
        "|---|---:|---:|",
        *(f"| {name} | {us:.1f} | {us / baseline:.0f} |" for name, us in rows),
        "",
        "Target: a typical malformed local repair under 100 µs.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="time tier-1 repair")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
