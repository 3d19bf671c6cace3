"""The client protocols served, each described once; routes, limits and errors read the table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from sanctum_proxy.errors import ProxyError

Endpoint = Callable[[Request], Awaitable[Response]]
ErrorBody = Callable[[ProxyError], Mapping[str, object]]


def openai_error(error: ProxyError) -> Mapping[str, object]:
    return error.body()


@dataclass(frozen=True)
class ClientProtocol:
    name: str
    paths: tuple[str, ...]
    serve: Endpoint
    error_body: ErrorBody = openai_error
    areas: tuple[str, ...] = ()  # prefixes with this error shape and the limits
    router: APIRouter | None = None  # discovery, pass-through
    limited: bool = True  # by max_concurrent_requests


def spelled(path: str) -> str:
    """No `;params`, no trailing slash, lower case."""
    return path.split(";", 1)[0].rstrip("/").lower() or "/"


class ProtocolTable:
    def __init__(self, protocols: Iterable[ClientProtocol]) -> None:
        self.protocols = tuple(protocols)
        self._by_path = {p: proto for proto in self.protocols for p in proto.paths}
        # Longest area first: /v1/messages before /v1/.
        self._areas = sorted(((a, proto) for proto in self.protocols for a in proto.areas), key=lambda x: -len(x[0]))

    def endpoint(self, path: str) -> ClientProtocol | None:
        """The protocol answering a POST to `path`."""
        found = self._by_path.get(path)
        return found if found is not None else self._by_path.get(spelled(path))

    def owner(self, path: str) -> ClientProtocol | None:
        """The protocol whose area holds `path`, if any."""
        found = self.endpoint(path)
        if found is not None:
            return found
        for area, proto in self._areas:
            if path == area.rstrip("/") or path.startswith(area if area.endswith("/") else area + "/"):
                return proto
        return None

    def error_body(self, path: str, error: ProxyError) -> Mapping[str, object]:
        owner = self.owner(path)
        return owner.error_body(error) if owner is not None else error.body()

    def limited(self, path: str) -> bool:
        owner = self.owner(path)
        return owner is not None and owner.limited

    def routers(self) -> list[APIRouter]:
        return [proto.router for proto in self.protocols if proto.router is not None]
