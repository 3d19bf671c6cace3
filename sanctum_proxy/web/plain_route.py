"""PlainRoute: an APIRoute for an endpoint that takes the Request and returns a Response itself.

FastAPI wraps every endpoint in its dependency machinery (dependencies solved, two AsyncExitStacks, the body
checked against parameters) even when the only parameter is the Request; for the proxy's hot endpoints that
was about as much work per request as Starlette's routing (bench/results/profile.md, Round 5). A PlainRoute
keeps what FastAPI gives the route (its entry in /openapi.json, its place in the router) and answers through
Starlette's own `request_response`: the Request made once, exceptions to the app's handlers as before. It
refuses an endpoint with any parameter other than the Request, or with dependencies, which it would not run.
It takes effect among the app's own routes (app.py adds them so): FastAPI answers the routes of an
`include_router` through contexts it builds per inclusion with its own handler.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.routing import request_response


class PlainRoute(APIRoute):
    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        parameters = list(inspect.signature(endpoint).parameters.values())
        if self.dependencies or len(parameters) != 1 or parameters[0].annotation not in (Request, "Request"):
            raise TypeError(f"{path}: a PlainRoute endpoint takes the Request alone and has no dependencies")
        self.app = request_response(endpoint)
