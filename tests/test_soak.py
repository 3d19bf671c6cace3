"""The short soak (bench/soak.py --quick: 50 clients, 20 s, three real processes) and the soak's own
checker, shown to reject what it must reject."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SOAK = Path(__file__).resolve().parent.parent / "bench" / "soak.py"


def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def plain_answer(s: ModuleType, kind: str, seed: int) -> dict:
    status, message = s.upstream_answer(kind, seed, 2)
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {"choices": [{"message": message, "finish_reason": finish}],
            "sanctum": {"rounds": 2 if kind == "retry" else 1}}


def test_soak_checker_accepts_the_scenario_and_rejects_a_changed_answer():
    s = soak()
    for kind in ("text", "call", "retry"):
        s.check(kind, 7, 200, plain_answer(s, kind, 7))
    wrong = plain_answer(s, "call", 7)
    wrong["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] += " "
    with pytest.raises(s.Wrong):
        s.check("call", 7, 200, wrong)
    text = plain_answer(s, "text", 7)
    text["choices"][0]["message"]["content"] = text["choices"][0]["message"]["content"][:-1]
    with pytest.raises(s.Wrong):
        s.check("text", 7, 200, text)


def test_soak_masks_only_random_ids():
    s = soak()
    a = {"id": "chatcmpl-" + "a" * 32, "created": 1, "x": [{"id": "call_" + "b" * 24}], "y": "call_up_1"}
    b = {"id": "chatcmpl-" + "c" * 32, "created": 2, "x": [{"id": "call_" + "d" * 24}], "y": "call_up_1"}
    assert s.masked(a) == s.masked(b)
    assert s.masked(a) != s.masked({**b, "y": "call_up_2"})


def test_stream_that_is_cut_or_carries_an_error_is_not_accepted():
    s = soak()
    with pytest.raises(s.Wrong):
        s.accumulate([{"choices": [{"delta": {"content": "a"}}]}])
    with pytest.raises(s.Wrong):
        s.accumulate([{"error": {"message": "x"}}, "[DONE]"])


def test_quick_soak_loses_and_corrupts_nothing_and_memory_stays_flat(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(SOAK), "--quick", "--json", str(out)], capture_output=True,
                         timeout=180, text=True)
    assert out.exists(), run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["lost"] == 0 and result["wrong"] == 0, result["samples"]
    assert result["requests"] > 200 and result["proxy_alive"]
    assert result["rss_mib"]["flat"], result["rss_mib"]
    assert run.returncode == 0
