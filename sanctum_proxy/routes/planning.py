"""A request's Plan for the round loop: its tools, mode, call format and constraint, from the settings, the
auto-mode decisions and what the upstream says of the model (asked once per model)."""

from __future__ import annotations

from dataclasses import dataclass

from sanctum_proxy.config import Settings
from sanctum_proxy.core import omens as om
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.repair import history
from sanctum_proxy.repair.loop_data import Plan
from sanctum_proxy.repair.toolbox import Toolbox
from sanctum_proxy.services import Services
from sanctum_proxy.upstreams import capabilities
from sanctum_proxy.upstreams.pools import Destination


@dataclass(frozen=True)
class Planner:
    settings: Settings
    services: Services
    dest: Destination  # decisions and capabilities are kept per (upstream, model)
    auth: str | None = None  # the client's key, forwarded to the upstream's probes too

    async def plan(self, chat: ChatRequest) -> Plan:
        settings, key = self.settings, self.dest.key
        book = Toolbox.of(chat.tools) if chat.tools else None
        forbidden = None
        if book is not None and chat.body.get("tool_choice") == "none":
            book, forbidden = None, book
        choice = chat.controls.spell_calling
        mode = "prompted" if choice == "prompted" else "native"
        opening: list[om.Omen] = []
        if choice == "auto":
            decision = self.services.modes.get(key, chat.model)
            if decision is None and book is not None and settings.probe_capabilities:
                opening = await self.settle_by_probe(chat.model)
                decision = self.services.modes.get(key, chat.model)
            if decision is not None:
                mode = decision.mode
        prompt_format = await self.call_format(chat.model, mode, book)  # may probe: caps after it
        body, mended = history.mended(chat.body, prompt_format)
        opening += mended
        caps = self.services.capabilities.cached(key, chat.model)
        constrain = chat.controls.constrain or settings.constrain
        if caps is None and mode == "native" and book is not None and constrain != "off" \
                and settings.probe_capabilities:
            caps = await self.probed(chat.model)
        if caps is not None and caps.json_schema is False:
            constrain = "off"
        return Plan(body=body, book=book, mode=mode, auto=choice == "auto",  # type: ignore[arg-type]
                    max_rounds=chat.controls.max_repair_rounds, on_surrender=chat.controls.on_surrender,
                    prompt_format=prompt_format, upstream=key,
                    opening_omens=tuple(opening), constrain=constrain,  # type: ignore[arg-type]
                    correction_context=settings.correction_context,
                    grammar=caps is not None and caps.server == "llama.cpp",
                    tool_choice=caps is None or caps.tool_choice is not False,
                    native_calls=caps.tools if caps is not None else None,
                    max_repair_bytes=settings.max_repair_bytes, follow_up_calls=settings.follow_up_calls,
                    max_grammar_bytes=settings.max_grammar_bytes, forbidden=forbidden)

    async def call_format(self, model: str, mode: str, book: Toolbox | None) -> str:
        """The configured call format; for "auto" the family of the model's chat template, else Hermes."""
        fmt = self.settings.prompt_format_for(model)
        if fmt != "auto":
            return fmt
        caps = self.services.capabilities.cached(self.dest.key, model)
        if caps is None and mode == "prompted" and book is not None and self.settings.probe_capabilities:
            caps = await self.probed(model)
        return (caps.family if caps is not None else None) or "hermes"

    async def probed(self, model: str) -> capabilities.Capabilities:
        """What the upstream says of this model, asked once."""
        upstream = self.dest.upstream
        return await self.services.capabilities.get(self.dest.key, model, lambda: capabilities.probe(
            upstream, upstream.root_url, model, self.settings.probe_timeout, self.auth))

    async def settle_by_probe(self, model: str) -> list[om.Omen]:
        """A model without tool support goes prompted before it sees `tools`."""
        caps = await self.probed(model)
        if caps.tools is not False or self.services.modes.get(self.dest.key, model) is not None:
            return []
        self.services.modes.settle(self.dest.key, model, "prompted", "capability_probe")
        return [om.fallback(0, "capability_probe", None, caps.source)]
