"""The app's long-lived parts, typed: built once by `create_app` (app.py) and stored on `app.state.services`;
a route reads them through `services(request)`, never through the untyped `request.app.state`. The upstream
pool a request was routed to is the request's own: `destination(request)`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

if TYPE_CHECKING:  # only for the annotations: web/auth.py reads its KeyRing from here
    from sanctum_proxy.config import Settings
    from sanctum_proxy.state.recorder import Recorder
    from sanctum_proxy.state.replicated import SharedState
    from sanctum_proxy.upstreams.auto_mode import ModeBook
    from sanctum_proxy.upstreams.capabilities import CapabilityBook
    from sanctum_proxy.upstreams.pools import Destination, UpstreamPools
    from sanctum_proxy.web.auth import KeyRing


@dataclass
class Services:
    settings: Settings
    shared: SharedState  # the tables kept in Redis or in memory (state/replicated.py)
    modes: ModeBook
    keys: KeyRing
    capabilities: CapabilityBook
    recorder: Recorder
    started_pools: UpstreamPools | None = None  # made when the app starts (its connections need the loop)

    @property
    def pools(self) -> UpstreamPools:
        if self.started_pools is None:
            raise RuntimeError("the upstream pools are made when the app starts (app.py lifespan)")
        return self.started_pools


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def destination(request: Request) -> Destination:
    """The upstream pool this request was routed to (routes/chat.start_rounds sets it)."""
    found: Destination = request.state.destination
    return found
