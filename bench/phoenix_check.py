"""By hand: a tools request with a correction round through the proxy, its spans read back from a real Arize Phoenix.

    python bench/phoenix_check.py [--results FILE | -] [--timeout 300] [--dump]

Phoenix comes from bench/.venv-phoenix (made on first run); the proxy, a child process, needs the `[otel]` extra.
Exits 1 when a check fails, 2 when Phoenix cannot be installed or started.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import signal
import subprocess
import sys
import time
import venv
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from bench.servers import Child, exit_on_sigterm, free_port, sanctum  # noqa: E402
from tests.conftest import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream, Step, completion, native_call  # noqa: E402
from tests.tools import WEATHER  # noqa: E402

PHOENIX = "arize-phoenix==20.26.1"
VENV = BENCH / ".venv-phoenix"
PROJECT = "sanctum-phoenix-check"  # Phoenix's project: the resource's openinference.project.name
COMMAND = "python bench/phoenix_check.py"
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
       "sanctum": {"constrain": "off"}}
USAGE = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49,
         "prompt_tokens_details": {"cached_tokens": 32}, "completion_tokens_details": {"reasoning_tokens": 4}}


class Unavailable(Exception):
    """Phoenix could not be installed or started here."""


def phoenix_venv(install_timeout: float) -> Path:
    """bench/.venv-phoenix's `phoenix`, installed first where missing."""
    python, phoenix = VENV / "bin" / "python", VENV / "bin" / "phoenix"
    if phoenix.is_file() and installed_version(python) == PHOENIX.split("==")[1]:
        return phoenix
    if not python.is_file():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.create(VENV, with_pip=True)
    print(f"installing {PHOENIX} into {VENV.relative_to(ROOT)} (minutes the first time)", flush=True)
    try:
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", PHOENIX], capture_output=True, text=True,
                              timeout=install_timeout)
    except subprocess.TimeoutExpired as e:
        raise Unavailable(f"pip install {PHOENIX} took over {install_timeout:.0f} s") from e
    if done.returncode != 0 or not phoenix.is_file():
        raise Unavailable(f"pip install {PHOENIX} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return phoenix


def installed_version(python: Path) -> str | None:
    done = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('arize-phoenix'))"],
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or None


def phoenix_server(phoenix: Path) -> Child:
    """`phoenix serve` on loopback, its SQLite in a scratch dir; its gRPC collector ignores PHOENIX_HOST."""
    port = free_port()
    env = {"PHOENIX_WORKING_DIR": "{scratch}", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port()),
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false"}
    return Child("phoenix", [str(phoenix), "serve"], f"http://127.0.0.1:{port}", "/healthz", env=env,
                 startup_timeout=180.0)


def script_correction(fake: FakeUpstream) -> None:
    """Round 1 calls an unknown tool (rejected); round 2's arguments have a trailing comma (mended)."""
    fake.push(Step(body=completion(None, [native_call("lookup_weather", '{"city":"Paris"}')], "tool_calls")),
              Step(body={**completion(None, [native_call("get_weather", '{"city":"Paris",}')], "tool_calls"),
                         "model": "m-q4", "usage": USAGE}))


def trace_spans(phoenix_url: str, trace_id: str, want: int, seconds: float) -> list[dict[str, Any]]:
    """One trace's spans in PROJECT, asked until `want` are there or `seconds` pass."""
    deadline = time.monotonic() + seconds
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        r = httpx.get(f"{phoenix_url}/v1/projects/{PROJECT}/spans", params={"trace_id": trace_id}, timeout=10)
        if r.status_code == 200:  # 404 until the project's first span is stored
            found = r.json()["data"]
            if len(found) >= want:
                return found
        time.sleep(0.5)
    return found


@dataclass
class Check:
    what: str
    expected: str
    found: str

    @property
    def ok(self) -> bool:
        return self.expected == self.found


@dataclass
class Sent:
    """What the client and the upstream saw."""

    trace_id: str
    parent_id: str
    sanctum_trace_id: str
    upstream_traceparents: list[str]


def checks(spans: list[dict[str, Any]], sent: Sent) -> list[Check]:
    """The rows. Phoenix keeps no span kind: the request span is the client span's child, the rounds its own."""
    requests = [s for s in spans if s.get("parent_id") == sent.parent_id]
    request = requests[0] if len(requests) == 1 else {"attributes": {}, "context": {}, "events": []}
    rounds = sorted((s for s in spans if s.get("parent_id") == request["context"].get("span_id")),
                    key=lambda s: s["attributes"].get("sanctum.round", 0))
    a = request["attributes"]
    events = [(e["name"], e.get("attributes", {})) for r in rounds for e in r.get("events", [])]
    rejected = [f for n, f in events if n == "sanctum.SpellCallRejected"]
    repaired = [f for n, f in events if n == "sanctum.SpellCallRepaired"]
    traceparents = [f"00-{sent.trace_id}-{r['context']['span_id']}-01" for r in rounds]
    return [
        Check("spans of the client's trace", "3", str(len(spans))),
        Check("request span, child of the client's span", "1", str(len(requests))),
        Check("round spans under it (sanctum.round)", "1 2",
              " ".join(str(r["attributes"].get("sanctum.round")) for r in rounds)),
        Check("trace id: the client's", sent.trace_id, ",".join(sorted({s["context"]["trace_id"] for s in spans}))),
        Check("sanctum.trace_id: the answer's", sent.sanctum_trace_id, str(a.get("sanctum.trace_id"))),
        Check("gen_ai.operation.name (request, rounds)", "chat chat chat",
              " ".join(str(s["attributes"].get("gen_ai.operation.name")) for s in [request, *rounds])),
        Check("gen_ai.request.model / response.model", "m m-q4",
              f"{a.get('gen_ai.request.model')} {a.get('gen_ai.response.model')}"),
        Check("gen_ai.response.model per round", "fake-model m-q4",
              " ".join(str(r["attributes"].get("gen_ai.response.model")) for r in rounds)),
        Check("gen_ai.usage.input_tokens / output_tokens", "50 14",
              f"{a.get('gen_ai.usage.input_tokens')} {a.get('gen_ai.usage.output_tokens')}"),
        Check("gen_ai.usage.cache_read.input_tokens / reasoning.output_tokens", "32 4",
              f"{a.get('gen_ai.usage.cache_read.input_tokens')} {a.get('gen_ai.usage.reasoning.output_tokens')}"),
        Check("sanctum.outcome / sanctum.rounds", "rejected 2",
              f"{a.get('sanctum.outcome')} {a.get('sanctum.rounds')}"),
        Check("sanctum.round.outcome per round", "rejected accepted",
              " ".join(str(r["attributes"].get("sanctum.round.outcome")) for r in rounds)),
        Check("round 1 event sanctum.SpellCallRejected", "unknown_spell lookup_weather",
              " ".join(f"{f.get('sanctum.reason')} {f.get('sanctum.spell')}" for f in rejected)),
        Check("round 2 event sanctum.SpellCallRepaired", "2 get_weather",
              " ".join(f"{f.get('sanctum.round')} {f.get('sanctum.spell')}" for f in repaired)),
        Check("upstream got each round's traceparent", "yes",
              "yes" if sent.upstream_traceparents == traceparents else f"no: {sent.upstream_traceparents}"),
        Check("Phoenix's own reading: span_kind, llm.token_count.total", "LLM 64",
              f"{request.get('span_kind')} {a.get('llm.token_count.total')}"),
    ]


def table(rows: list[Check]) -> str:
    lines = ["| check | expected | in Phoenix | |", "|---|---|---|---|"]
    lines += [f"| {c.what} | {c.expected} | {c.found} | {'ok' if c.ok else 'MISSING'} |" for c in rows]
    return "\n".join(lines)


def say(line: str, printed: list[str]) -> None:
    print(line, flush=True)
    printed.append(line)


def run(phoenix: Path, args: argparse.Namespace, printed: list[str]) -> tuple[list[Check], str]:
    """The rows and Phoenix's version."""
    fake = FakeUpstream()
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    started = time.monotonic()
    with ExitStack() as stack:
        px = started_child(stack, phoenix_server(phoenix))
        upstream = stack.enter_context(ServerThread(fake.app()))
        say(f"phoenix serve answered after {time.monotonic() - started:.0f} s", printed)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": px.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
               "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}"}
        with ExitStack() as proxy_stack:
            proxy = started_child(proxy_stack, sanctum(upstream.url + "/v1", env=env))
            script_correction(fake)
            r = httpx.post(proxy.url + "/chat/completions", json=ASK, timeout=30,
                           headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
            say(f"proxy answered {r.status_code}, x-sanctum-rounds {r.headers.get('x-sanctum-rounds')}", printed)
        # stopping, the proxy flushed its spans
        spans = trace_spans(px.url, trace_id, 3, args.span_timeout)
        if args.dump:
            print(json.dumps(spans, indent=1))
        version = httpx.get(px.url + "/arize_phoenix_version", timeout=10).text.strip()
    sanctum_trace_id = r.json().get("sanctum", {}).get("trace_id", "") if r.status_code == 200 else ""
    sent = Sent(trace_id, parent_id, sanctum_trace_id, [h.get("traceparent", "") for h in fake.chat_headers])
    return checks(spans, sent), version


def started_child(stack: ExitStack, child: Child) -> Child:
    """Start a child that `stack` stops, even if its start is cut short."""
    stack.push(child)
    return child.start()


def out_of_time(signum: int, frame: object) -> None:
    raise TimeoutError("the check ran out of time")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(BENCH / "results" / "phoenix_check.md"),
                   help="the markdown file written ('-': none)")
    p.add_argument("--timeout", type=int, default=300, help="seconds for the check, the install apart")
    p.add_argument("--install-timeout", type=float, default=1200, help="seconds for pip install")
    p.add_argument("--span-timeout", type=float, default=30, help="seconds to wait for the spans in Phoenix")
    p.add_argument("--dump", action="store_true", help="print the spans as Phoenix returns them")
    args = p.parse_args(argv)
    exit_on_sigterm()  # children stop on SIGTERM too
    printed: list[str] = []
    try:
        phoenix = phoenix_venv(args.install_timeout)
        signal.signal(signal.SIGALRM, out_of_time)
        signal.alarm(args.timeout)
        rows, version = run(phoenix, args, printed)
    except (Unavailable, RuntimeError) as e:  # RuntimeError: a child did not start
        print(f"Phoenix unavailable: {e}", file=sys.stderr)
        return 2
    except TimeoutError as e:
        print(f"{e} ({args.timeout} s)", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
    failed = [c.what for c in rows if not c.ok]
    say(f"Phoenix {version}\n{table(rows)}", printed)
    say("all present" if not failed else f"missing: {'; '.join(failed)}", printed)
    if args.results != "-":
        write_results(Path(args.results), version, "\n".join(printed))
    return 1 if failed else 0


def write_results(path: Path, version: str, printed: str) -> None:
    size = sum(f.stat().st_size for f in VENV.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20
    path.write_text(
        f"# The proxy's spans in Arize Phoenix\n\n`{COMMAND}` ({time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"arize-phoenix {version} in bench/.venv-phoenix, Python {platform.python_version()}): one tools request "
        "whose first round calls an unknown tool (rejected, corrected) and whose second round's arguments need "
        "mending, sent with a `traceparent`; the spans read back from Phoenix's "
        f"`GET /v1/projects/{PROJECT}/spans?trace_id=...`. The venv holds {size:.0f} MiB; Phoenix's HTTP port "
        "(UI, REST, OTLP) listens on 127.0.0.1, its gRPC collector on every interface (it ignores PHOENIX_HOST), "
        f"both on free ports.\n\n```\n{printed}\n```\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
