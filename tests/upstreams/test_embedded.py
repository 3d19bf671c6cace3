"""The embedded llama-server as a child process, run here with a stand-in binary (tests/fakes/fake_llama_server.py);
the real one is exercised by tests/e2e."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sanctum_proxy.upstreams.embedded import LlamaServer

FAKE = Path(__file__).parents[1] / "fakes" / "fake_llama_server.py"


def stand_in(tmp_path: Path) -> Path:
    """An executable that runs the fake server with this Python (LlamaServer runs `binary -m model ...`)."""
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    binary.chmod(0o755)
    return binary


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its new parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_start_waits_for_health_and_stop_ends_the_child(tmp_path):
    server = LlamaServer(binary=stand_in(tmp_path), model=tmp_path / "model.gguf", startup_timeout=20)
    with server:
        assert server.running
        pid = server._proc.pid  # type: ignore[union-attr]
    assert not server.running and not alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_does_not_outlive_a_proxy_killed_with_sigkill(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from sanctum_proxy.upstreams.embedded import LlamaServer
        server = LlamaServer(binary=Path({str(stand_in(tmp_path))!r}), model=Path("m.gguf"), startup_timeout=20)
        server.start()
        print(server._proc.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
        if child and alive(child):  # the failure this test is about: do not leave it running
            os.kill(child, signal.SIGKILL)
