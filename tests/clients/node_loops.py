"""Runs tests/node/tool_loops.mjs (the JS clients' tool loops) and reads back its one JSON line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).parent.parent / "node"


def need(package: str) -> None:
    if shutil.which("node") is None or not (NODE_DIR / "node_modules" / package).is_dir():
        pytest.skip(f"node or tests/node/node_modules/{package} missing (npm ci in tests/node)",
                    allow_module_level=True)


def run_loop(base_url: str, loop: str, stream: bool) -> dict[str, Any]:
    # The timeout only turns a hang into a failure; a passing run takes a second or two.
    run = subprocess.run(["node", str(NODE_DIR / "tool_loops.mjs"), base_url, loop, "1" if stream else "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out
