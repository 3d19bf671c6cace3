"""The app's long-lived parts, typed, read by routes through `services(request)` rather than `request.app.state`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

from sanctum_proxy.state.surrendered import SurrenderMemo

if TYPE_CHECKING:  # web/auth.py reads its KeyRing from here
    from sanctum_proxy.config import Settings
    from sanctum_proxy.state.recorder import Recorder
    from sanctum_proxy.state.replicated import SharedState
    from sanctum_proxy.upstreams.auto_mode import ModeBook
    from sanctum_proxy.upstreams.capabilities import CapabilityBook
    from sanctum_proxy.upstreams.lesson_checks import Lessons
    from sanctum_proxy.upstreams.pools import UpstreamPools
    from sanctum_proxy.web.auth import KeyRing


@dataclass
class Services:
    settings: Settings
    shared: SharedState  # Redis or in-memory tables
    modes: ModeBook
    keys: KeyRing
    capabilities: CapabilityBook
    recorder: Recorder
    lessons: Lessons  # the two books above, as a round's lessons reach them
    started_pools: UpstreamPools | None = None  # made at start-up: its connections need the loop
    surrendered: SurrenderMemo = field(default_factory=SurrenderMemo)  # per process, not shared by replicas

    @property
    def pools(self) -> UpstreamPools:
        if self.started_pools is None:
            raise RuntimeError("the upstream pools are made when the app starts (app.py lifespan)")
        return self.started_pools


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found
