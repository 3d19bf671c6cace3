"""The proxy answers only requests meant for it: against DNS rebinding and cross-site pages (docs/security.md).

A page whose name is rebound to 127.0.0.1 sends its own name in `Host`; a rebound name is never an address.
"""

from __future__ import annotations

import ipaddress
from fnmatch import fnmatchcase

from starlette.types import ASGIApp, Receive, Scope, Send

from sanctum_proxy.errors import InvalidRequest, ProxyError
from sanctum_proxy.web.auth import repeated_key_header
from sanctum_proxy.web.client_protocols import ProtocolTable
from sanctum_proxy.web.json_response import JsonResponse

ALWAYS_ANSWERED = frozenset({"/healthz"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_TYPES = ("text/plain", "multipart/form-data")  # a page sends these cross-site without a preflight
HOSTS_KEPT = 256
BROWSER_FORM_TYPE = "application/x-www-form-urlencoded"  # curl -d's default: refused only from a browser


class MisdirectedHost(InvalidRequest):
    status = 421
    code = "misdirected_request"


class CrossSite(InvalidRequest):
    status = 403
    code = "cross_site_request"


class NotJson(InvalidRequest):
    status = 415
    code = "unsupported_media_type"


def is_loopback(host: str) -> bool:
    """`host`: a name or an address, without a port."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    address = ip_address(host)
    return address is not None and address.is_loopback


def ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def host_name(value: str) -> str:
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class HostCheck:
    """ASGI middleware: 421 for another `Host`, 403 cross-site, 400 for a second key header, 415 for a form."""

    def __init__(self, app: ASGIApp, bound_to: str, allowed_hosts: list[str], cors_origins: list[str],
                 table: ProtocolTable) -> None:
        self.app, self.table = app, table
        self.loopback = is_loopback(bound_to)
        self.allowed = [name.lower().rstrip(".") for name in allowed_hosts]
        self.origins = frozenset(origin.rstrip("/").lower() for origin in cors_origins)
        self._hosts: dict[str, bool] = {}  # every request names one: its address is parsed once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in ALWAYS_ANSWERED:
            error = self.refusal(scope)
            if error is not None:
                await JsonResponse(self.table.error_body(scope["path"], error), status_code=error.status)(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> ProxyError | None:
        repeated = repeated_key_header(scope["headers"])
        if repeated is not None:
            return InvalidRequest(f"the {repeated} header is sent more than once: send one key")
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)
        host = headers.get(b"host", b"").decode("latin-1").strip()
        if host and not self.host_allowed(host_name(host)):
            return MisdirectedHost(f"this proxy does not serve the host {host[:100]!r}: add it to allowed_hosts")
        origin = headers.get(b"origin", b"").decode("latin-1").strip().rstrip("/").lower()
        if origin and not self.origin_allowed(origin, scope, host):
            return CrossSite(f"requests from the page {origin[:100]!r} are refused: list it in cors_origins")
        if not origin and headers.get(b"sec-fetch-site") == b"cross-site" and not (
                scope["method"] in ("GET", "HEAD") and headers.get(b"sec-fetch-mode") == b"navigate"):
            return CrossSite("cross-site requests from a page are refused: list its origin in cors_origins")
        if scope["method"] in BODY_METHODS:
            kind = headers.get(b"content-type", b"").decode("latin-1").partition(";")[0].strip().lower()
            browser = bool(origin) or b"sec-fetch-site" in headers
            if kind in FORM_TYPES or (browser and kind == BROWSER_FORM_TYPE):
                return NotJson(f"the body must be JSON (content-type: application/json), got {kind[:60]!r}")
        return None

    def host_allowed(self, name: str) -> bool:
        allowed = self._hosts.get(name)
        if allowed is None:
            if len(self._hosts) >= HOSTS_KEPT:
                self._hosts.clear()
            allowed = self._hosts[name] = self._host_allowed(name)
        return allowed

    def _host_allowed(self, name: str) -> bool:
        name = name.lower().rstrip(".")
        if is_loopback(name) or any(fnmatchcase(name, allowed) for allowed in self.allowed):
            return True
        return not self.loopback and (not self.allowed or ip_address(name) is not None)

    def origin_allowed(self, origin: str, scope: Scope, host: str) -> bool:
        if "*" in self.origins or origin in self.origins:
            return True
        return origin == f"{scope.get('scheme', 'http')}://{host.lower()}"  # the proxy's own pages (the viewer)
