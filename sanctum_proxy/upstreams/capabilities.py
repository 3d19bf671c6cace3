"""What an upstream can do for one model, learned by asking it before the first tools request.

    llama.cpp  GET  /props      chat_template_caps.supports_tool_calls / supports_tools (the template's caps),
                                default_generation_settings.n_ctx (a slot's context)
    Ollama     POST /api/show   "capabilities" contains "tools"; model_info `<arch>.context_length` and the
                                parameters' `num_ctx` say its context (routes/context.py)
Both answers also carry the chat template (`chat_template`; Ollama `template` and `details.family`), from
which `families.detect` names the call format the model was trained on (prompted mode writes it).
    others     neither answers: unknown, and auto mode finds out by trying (a rejection flips it)

`from_props` and `from_show` read those answers (pure). `CapabilityBook` caches one answer per
(upstream, model) and probes each key once even when many first requests arrive together. A probe that
fails or times out is "unknown" for `unknown_ttl` seconds, then asked again. Probes of models not yet known
are rate-limited (`probes_per_minute`, a token bucket for all upstreams together): past it a new model is
"unknown" without a probe and without a row (auto mode finds out by trying), so clients that make up model
names cannot make the proxy send two upstream requests for each. With `redis_url` the bucket is one for every
replica (`shared`); while Redis does not answer, each process' own bucket holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from sanctum_proxy.codecs.families import detect
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.state.replicated import MAX_ROWS, LocalTable, Table, pair_key, pair_of


@dataclass(frozen=True)
class Capabilities:
    tools: bool | None  # None: the upstream did not say
    json_schema: bool | None  # can it constrain decoding with response_format json_schema
    server: str  # llama.cpp | ollama | unknown
    source: str  # what said so, for /sanctum/status and the omen
    family: str | None = None  # the call format its chat template shows (families.detect), if known
    tool_choice: bool | None = None  # False: it refused tool_choice "required" (a correction round's)
    context: int | None = None  # the model's context in tokens, where the upstream says (llama.cpp: a slot's n_ctx)
    context_length: int | None = None  # Ollama: the model's trained context (model_info `<arch>.context_length`)
    num_ctx: int | None = None  # Ollama: the context its Modelfile sets (parameters `num_ctx`), if it sets one

    def to_json(self) -> JSONObject:
        return asdict(self)


UNKNOWN = Capabilities(tools=None, json_schema=None, server="unknown", source="no probe answered")


def from_props(body: Any) -> Capabilities | None:
    """llama.cpp GET /props. A template that supports neither tools nor tool calls drops `tools` silently."""
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
    """A slot's context size in /props: `default_generation_settings.n_ctx` (older servers: top-level `n_ctx`)."""
    settings = body.get("default_generation_settings")
    found = settings.get("n_ctx") if isinstance(settings, dict) else None
    if found is None:
        found = body.get("n_ctx")
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None


def from_show(body: Any) -> Capabilities | None:
    """Ollama's POST /api/show (v0.6.4+): the same list its own 400 "does not support tools" is decided on."""
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
    """The `num_ctx` line of /api/show's `parameters` (one `name value` pair a line), if there is one."""
    for line in parameters.splitlines() if isinstance(parameters, str) else ():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return int(value.strip())
    return None


class JsonProber(Protocol):
    def probe_json(self, method: str, url: str, body: Any = None, timeout: float = 5.0) -> Awaitable[Any]: ...


async def probe(upstream: JsonProber, root_url: str, model: str, timeout: float = 3.0) -> Capabilities:
    """Ask llama.cpp's way, then Ollama's; UNKNOWN when neither answers in time."""
    found = from_props(await upstream.probe_json("GET", f"{root_url}/props", timeout=timeout))
    if found is None:
        found = from_show(
            await upstream.probe_json("POST", f"{root_url}/api/show", {"model": model}, timeout=timeout)
        )
    return found or UNKNOWN


class SharedRate(Protocol):
    """A token bucket every replica draws from (state/replicated.SharedState); None: it cannot answer now."""

    async def take_token(self, bucket: str, per_minute: int) -> bool | None: ...


class CapabilityBook:
    """Probe answers per (upstream, model), in a `Table`: this process' own, or one every replica shares
    through Redis (sanctum_proxy.state.replicated; rows carry wall-clock times so they mean the same everywhere)."""

    def __init__(self, *, unknown_ttl: float = 60.0, clock: Callable[[], float] = time.time,
                 table: Table | None = None, probes_per_minute: int = 30,
                 shared: SharedRate | None = None) -> None:
        self._known: Table = table if table is not None else LocalTable()
        self._pending: dict[tuple[str, str], asyncio.Future[Capabilities]] = {}
        self._unknown_ttl = unknown_ttl
        self._clock = clock
        self._shared = shared  # with redis_url: one bucket for every replica (state/replicated.py)
        self._per_minute = probes_per_minute
        self._rate = probes_per_minute / 60.0
        self._burst = float(probes_per_minute)
        self._tokens = self._burst
        self._filled = clock()
        # The last row read and what it says, per key: a row is read three times a request and is the same
        # object until it is written again (a table in Redis hands out new ones: those are read afresh).
        self._parsed: dict[str, tuple[JSONObject, Capabilities, float]] = {}

    async def _may_probe_now(self) -> bool:
        """Take a probe token: from the bucket every replica shares, or (without Redis, or while it does not
        answer) from this process' own."""
        if self._shared is not None:
            taken = await self._shared.take_token("probes", self._per_minute)
            if taken is not None:
                return taken
        return self._may_probe()

    def _may_probe(self) -> bool:
        """Take a probe token if one is left (the bucket refills at probes_per_minute)."""
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
            except (KeyError, TypeError, ValueError):  # a row some other version wrote: probe again
                return None
            at = float(written)
            if len(self._parsed) >= MAX_ROWS:
                self._parsed.clear()
            self._parsed[key] = (row, caps, at)
        if caps.tools is None and self._clock() - at > self._unknown_ttl:
            return None
        return caps

    def refuse_schema(self, upstream: str, model: str) -> None:
        """The upstream answered a constrained round with an error about the schema: stop constraining."""
        caps = self.cached(upstream, model) or UNKNOWN
        self.remember(upstream, model, replace(caps, json_schema=False))

    def refuse_tool_choice(self, upstream: str, model: str) -> None:
        """The upstream refused tool_choice "required": native corrections go without it (with the transcript)."""
        caps = self.cached(upstream, model) or UNKNOWN
        self.remember(upstream, model, replace(caps, tool_choice=False))

    def remember(self, upstream: str, model: str, caps: Capabilities) -> None:
        self._known.set(pair_key(upstream, model), {**caps.to_json(), "at": self._clock()})

    async def get(
        self, upstream: str, model: str, ask: Callable[[], Awaitable[Capabilities]]
    ) -> Capabilities:
        """The cached answer, or one probe shared by every caller waiting on the same key."""
        if (caps := self.cached(upstream, model)) is not None:
            return caps
        key = (upstream, model)
        if key in self._pending:
            return await asyncio.shield(self._pending[key])
        if not await self._may_probe_now():
            return UNKNOWN  # over the probe rate: not asked, not remembered (asked when a token is free)
        future: asyncio.Future[Capabilities] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        caps = UNKNOWN
        try:
            caps = await ask()
        except Exception:  # a probe is best effort: any failure means "find out by trying"
            caps = UNKNOWN
        finally:  # also when this caller is cancelled: the others waiting must not hang
            del self._pending[key]
            future.set_result(caps)
        self.remember(upstream, model, caps)
        return caps

    def snapshot(self) -> list[JSONObject]:
        out = []
        for key, row in self._known.items():
            upstream, model = pair_of(key)
            out.append({"upstream": upstream, "model": model, **{k: v for k, v in row.items() if k != "at"}})
        return out


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
    """A yes / no / unknown the proxy wrote into a row: anything else is unknown."""
    return value if isinstance(value, bool) else None
