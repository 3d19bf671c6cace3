"""What an upstream can do for one model, asked once: llama.cpp's GET /props or Ollama's POST /api/show.

Probes of new models are rate-limited, so made-up model names cannot multiply upstream requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from sanctum_proxy.codecs.families import detect
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.state.replicated import MAX_ROWS, LocalTable, Table, clear_pairs, pair_key, pair_of


@dataclass(frozen=True)
class Capabilities:
    tools: bool | None  # None: the upstream did not say
    json_schema: bool | None  # response_format json_schema
    server: str  # llama.cpp | ollama | unknown
    source: str
    family: str | None = None  # the call format of its chat template
    tool_choice: bool | None = None  # False: it refused tool_choice "required"
    context: int | None = None  # llama.cpp: a slot's n_ctx
    context_length: int | None = None  # Ollama: the trained context
    num_ctx: int | None = None  # Ollama: its Modelfile's, if set

    def to_json(self) -> JSONObject:
        return asdict(self)


REFUSAL_SECONDS = 86400.0  # the upstream may take it since
UNKNOWN = Capabilities(tools=None, json_schema=None, server="unknown", source="no probe answered")


def from_props(body: Any) -> Capabilities | None:
    """A template without tools or tool calls drops `tools` silently."""
    if not isinstance(body, dict) or not isinstance(body.get("chat_template_caps"), dict):
        return None
    caps = body["chat_template_caps"]
    tools = bool(caps.get("supports_tool_calls")) and bool(caps.get("supports_tools", True))
    said = ", ".join(f"{k}={caps.get(k)}" for k in ("supports_tools", "supports_tool_calls") if k in caps)
    return Capabilities(
        tools=tools, json_schema=True, server="llama.cpp", source=f"/props chat_template_caps {said}",
        family=detect(body.get("chat_template")), context=props_context(body),
    )


def props_context(body: dict[str, Any]) -> int | None:
    """`default_generation_settings.n_ctx`, or older servers' top-level `n_ctx`."""
    settings = body.get("default_generation_settings")
    found = settings.get("n_ctx") if isinstance(settings, dict) else None
    if found is None:
        found = body.get("n_ctx")
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None


def from_show(body: Any) -> Capabilities | None:
    """Ollama's own 400 "does not support tools" reads the same list."""
    if not isinstance(body, dict) or not isinstance(body.get("capabilities"), list):
        return None
    listed = [str(c) for c in body["capabilities"]]
    details = body.get("details")
    family = detect(body.get("template"), details.get("family") if isinstance(details, dict) else None)
    return Capabilities(
        tools="tools" in listed, json_schema=True, server="ollama", source=f"/api/show capabilities {listed}",
        family=family, context_length=trained_context(body.get("model_info")),
        num_ctx=modelfile_num_ctx(body.get("parameters")),
    )


def trained_context(info: Any) -> int | None:
    """model_info's `<general.architecture>.context_length` (api/types.go ShowResponse.ModelInfo)."""
    if not isinstance(info, dict):
        return None
    length = info.get(f"{info.get('general.architecture')}.context_length")
    return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None


def modelfile_num_ctx(parameters: Any) -> int | None:
    """The `num_ctx` line of `parameters`, if any."""
    for line in parameters.splitlines() if isinstance(parameters, str) else ():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return int(value.strip())
    return None


class JsonProber(Protocol):
    def probe_json(self, method: str, url: str, body: Any = None, timeout: float = 5.0,
                   client_auth: str | None = None) -> Awaitable[Any]: ...


async def probe(upstream: JsonProber, root_url: str, model: str, timeout: float = 3.0,
                client_auth: str | None = None) -> Capabilities:
    """llama.cpp's way, then Ollama's; `client_auth`: the forwarded key of the client that asked."""
    found = from_props(await upstream.probe_json("GET", f"{root_url}/props", timeout=timeout, client_auth=client_auth))
    if found is None:
        found = from_show(await upstream.probe_json("POST", f"{root_url}/api/show", {"model": model}, timeout=timeout,
                                                    client_auth=client_auth))
    return found or UNKNOWN


class SharedRate(Protocol):
    """None: it cannot answer now."""

    async def take_token(self, bucket: str, per_minute: int) -> bool | None: ...


class CapabilityBook:
    """Probe answers per (upstream, model), maybe shared by replicas through Redis."""

    def __init__(self, *, unknown_ttl: float = 60.0, clock: Callable[[], float] = time.time,
                 table: Table | None = None, probes_per_minute: int = 30,
                 shared: SharedRate | None = None) -> None:
        self._known: Table = table if table is not None else LocalTable()
        self._pending: dict[tuple[str, str], asyncio.Future[Capabilities]] = {}
        self._unknown_ttl = unknown_ttl
        self._clock = clock
        self._shared = shared
        self._per_minute = probes_per_minute
        self._rate = probes_per_minute / 60.0
        self._burst = float(probes_per_minute)
        self._tokens = self._burst
        self._filled = clock()
        # parsed rows: a request reads one three times
        self._parsed: dict[str, tuple[JSONObject, Capabilities, float]] = {}
        self.checking: dict[tuple[str, str, str], asyncio.Task[None]] = {}  # lesson_checks.py

    async def may_probe_now(self) -> bool:
        """The shared bucket's token, else this process' own."""
        if self._shared is not None:
            taken = await self._shared.take_token("probes", self._per_minute)
            if taken is not None:
                return taken
        return self._may_probe()

    def _may_probe(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._filled) * self._rate)
        self._filled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def cached(self, upstream: str, model: str) -> Capabilities | None:
        key = pair_key(upstream, model)
        row = self._known.get(key)
        if row is None:
            return None
        seen = self._parsed.get(key)
        if seen is not None and seen[0] is row:
            caps, at = seen[1], seen[2]
        else:
            try:
                caps, written = _caps_of(row), row["at"]
                if not isinstance(written, int | float):
                    raise TypeError("at")
            except (KeyError, TypeError, ValueError):  # another version's row: probe again
                return None
            at = float(written)
            if len(self._parsed) >= MAX_ROWS:
                self._parsed.clear()
            self._parsed[key] = (row, caps, at)
        if (caps.json_schema is False or caps.tool_choice is False) and \
                self._clock() - _refused_at(row, at) > REFUSAL_SECONDS:
            self._known.delete(key)
            return None
        if caps.tools is None and self._clock() - at > self._unknown_ttl:
            return None
        return caps

    def refuse_schema(self, upstream: str, model: str) -> None:
        """A constrained round failed on its schema: stop constraining."""
        caps = self.cached(upstream, model) or UNKNOWN
        self._remember_refused(upstream, model, replace(caps, json_schema=False))

    def refuse_tool_choice(self, upstream: str, model: str) -> None:
        """Native corrections go without tool_choice "required" from now on."""
        caps = self.cached(upstream, model) or UNKNOWN
        self._remember_refused(upstream, model, replace(caps, tool_choice=False))

    def _remember_refused(self, upstream: str, model: str, caps: Capabilities) -> None:
        kept, _ = self._refusals(upstream, model, caps)
        self.remember(upstream, model, kept, refused_at=self._clock())

    def _refusals(self, upstream: str, model: str, caps: Capabilities) -> tuple[Capabilities, float | None]:
        """`caps` with the row's refusals still in force, and when they were made; the row is read even where its
        probe answer expired."""
        row = self._known.get(pair_key(upstream, model))
        written = row.get("at") if row is not None else None
        if row is None or not isinstance(written, int | float):
            return caps, None
        at = _refused_at(row, float(written))
        schema, tool_choice = row.get("json_schema") is False, row.get("tool_choice") is False
        if not (schema or tool_choice) or self._clock() - at > REFUSAL_SECONDS:
            return caps, None
        return replace(caps, json_schema=False if schema else caps.json_schema,
                       tool_choice=False if tool_choice else caps.tool_choice), at

    def remember(self, upstream: str, model: str, caps: Capabilities, *, refused_at: float | None = None) -> None:
        row: JSONObject = {**caps.to_json(), "at": self._clock()}
        if refused_at is not None:
            row["refused_at"] = refused_at
        self._known.set(pair_key(upstream, model), row)

    async def get(
        self, upstream: str, model: str, ask: Callable[[], Awaitable[Capabilities]]
    ) -> Capabilities:
        """The cached answer, or one probe shared by its waiters."""
        if (caps := self.cached(upstream, model)) is not None:
            return caps
        key = (upstream, model)
        if key in self._pending:
            return await asyncio.shield(self._pending[key])
        if not await self.may_probe_now():
            return UNKNOWN  # over the rate: not asked, not remembered
        future: asyncio.Future[Capabilities] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        caps = UNKNOWN
        try:
            caps = await ask()
        except Exception:  # best effort
            caps = UNKNOWN
        finally:  # also when cancelled: the others waiting must not hang
            caps, refused_at = self._refusals(upstream, model, caps)  # a fresh probe does not undo a refusal
            del self._pending[key]
            future.set_result(caps)
        self.remember(upstream, model, caps, refused_at=refused_at)
        return caps

    def clear(self, upstream: str | None = None, model: str | None = None) -> int:
        """Forget rows (None: any); how many."""
        return clear_pairs(self._known, upstream, model)

    def snapshot(self) -> list[JSONObject]:
        out = []
        for key, row in self._known.items():
            upstream, model = pair_of(key)
            out.append({"upstream": upstream, "model": model,
                        **{k: v for k, v in row.items() if k not in ("at", "refused_at")}})
        return out


def _refused_at(row: JSONObject, at: float) -> float:
    """When a row's refusals were made: its own stamp, else the row's (rows written before the stamp)."""
    refused = row.get("refused_at")
    return float(refused) if isinstance(refused, int | float) and not isinstance(refused, bool) else at


def _caps_of(row: JSONObject) -> Capabilities:
    family, tool_choice, context = row.get("family"), row.get("tool_choice"), row.get("context")
    return Capabilities(tools=_flag(row["tools"]), json_schema=_flag(row["json_schema"]), server=str(row["server"]),
                        source=str(row["source"]), family=family if isinstance(family, str) else None,
                        tool_choice=tool_choice if isinstance(tool_choice, bool) else None,
                        context=_count(context), context_length=_count(row.get("context_length")),
                        num_ctx=_count(row.get("num_ctx")))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _flag(value: object) -> bool | None:
    """Anything the proxy did not write is unknown."""
    return value if isinstance(value, bool) else None
