"""The benchmarks' servers as child processes: the canned upstream, sanctum-proxy and a LiteLLM proxy.

Each is a real server on a free loopback port, started the way a user starts it (`python -m sanctum_proxy`,
`litellm --config`), its output kept in a temporary log whose tail is shown when it fails to start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LITELLM_VENV_BIN = BENCH / ".venv-litellm" / "bin" / "litellm"


def exit_on_sigterm() -> None:
    """Make SIGTERM (`timeout`, CI) unwind like Ctrl-C, so that every `with` stops its child servers: they run
    in their own sessions and would otherwise outlive the benchmark."""
    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def pyplot() -> Any:
    """matplotlib's pyplot on the headless Agg backend, or None (said once) where it is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed: no plot (pip install -r bench/requirements.txt)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Child:
    """A server process: `with Child(cmd, url, ready_path) as child: child.url`."""

    def __init__(self, name: str, command: list[str], url: str, ready_path: str, *,
                 env: dict[str, str] | None = None, startup_timeout: float = 60.0, cwd: Path = ROOT) -> None:
        self.name, self.command, self.url, self.ready_path = name, command, url, ready_path
        self.cwd = cwd
        self.env = {**os.environ, **(env or {})}
        self.startup_timeout = startup_timeout
        self.log = tempfile.TemporaryFile()
        self.scratch = tempfile.TemporaryDirectory(prefix="bench-")  # what the server writes; gone at stop
        self.env = {k: v.replace("{scratch}", self.scratch.name) for k, v in self.env.items()}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Child:
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(self.url.removesuffix("/v1") + self.ready_path, timeout=2).status_code < 500:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer {self.ready_path} in {self.startup_timeout:.0f}s:\n"
                           f"{self.tail()}")

    def tail(self, lines: int = 25) -> str:
        self.log.flush()
        self.log.seek(0)
        return "\n".join(self.log.read().decode("utf-8", "replace").splitlines()[-lines:])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.scratch.cleanup()

    def __enter__(self) -> Child:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        self.log.close()


def canned_upstream(chunk_delay: float = 0.0, chunks: int = 4) -> Child:
    port = free_port()
    command = [sys.executable, str(BENCH / "canned_upstream.py"), "--port", str(port),
               "--chunk-delay", str(chunk_delay), "--chunks", str(chunks)]
    return Child("canned upstream", command, f"http://127.0.0.1:{port}/v1", "/v1/models")


def sanctum(upstream: str, *flags: str, env: dict[str, str] | None = None, tree: Path = ROOT) -> Child:
    """Default settings, except that traces go to a fresh file of this run rather than the user's store; `tree`
    is the directory whose sanctum_proxy/ runs."""
    port = free_port()
    command = [sys.executable, "-m", "sanctum_proxy", "--upstream", upstream, "--port", str(port), *flags]
    env = {"SANCTUM_TRACES_PATH": "{scratch}/traces.db", **(env or {})}
    return Child("sanctum-proxy", command, f"http://127.0.0.1:{port}/v1", "/healthz", env=env, cwd=tree)


def relay(upstream: str, *, parse: bool = False) -> Child:
    """bench/relay.py: a bare FastAPI + aiohttp relay, the floor under any proxy built on those parts (`parse`:
    one that decodes and encodes again what passes)."""
    port = free_port()
    command = [sys.executable, str(BENCH / "relay.py"), "--upstream", upstream, "--port", str(port)]
    return Child("relay", command + ["--parse"] * parse, f"http://127.0.0.1:{port}/v1", "/healthz")


def litellm_binary(given: str | None = None) -> str | None:
    """`--litellm PATH`, else bench/.venv-litellm/bin/litellm, else `litellm` on PATH."""
    if given:
        return given
    if LITELLM_VENV_BIN.is_file():
        return str(LITELLM_VENV_BIN)
    return shutil.which("litellm")


def litellm(upstream: str, binary: str, workdir: Path) -> Child:
    """LiteLLM's proxy with default settings, one openai-compatible model pointing at `upstream`."""
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: bench-model\n"
        "    litellm_params:\n"
        "      model: openai/bench-model\n"
        f"      api_base: {upstream}\n"
        "      api_key: sk-unused\n", encoding="utf-8")
    # The cost map env only keeps it from fetching its price list from GitHub at start-up (no internet here);
    # recent releases refuse to start without a master key, and the load generator sends this one.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": "sk-bench"}
    command = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    return Child("litellm", command, f"http://127.0.0.1:{port}/v1", "/health/liveliness", env=env,
                 startup_timeout=120.0)


def rss_mb(pid: int) -> float:
    """Resident set size of one process (Linux /proc), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
