"""schemathesis against the proxy's own OpenAPI document (FastAPI's /openapi.json), for the endpoints that
do not call a model: health, readiness, status, traces, metrics and the viewer's files. Generated requests
(odd query values, odd path segments) must never get a 5xx, and every answer must match the document.
The proxy is a real server on loopback in front of the scripted fake upstream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from tests.conftest import ServerThread
from tests.fakes.upstream import FakeUpstream

schemathesis = pytest.importorskip("schemathesis")

NON_LLM = r"^/(healthz|readyz|metrics|sanctum(/.*)?)$"

# The document is the app's own (what GET /openapi.json serves); the calls go to a real server. (Loading it
# lazily from a fixture would read pytest internals that pytest 9 removed.)
schema = schemathesis.openapi.from_dict(create_app(load_settings({})).openapi()).include(path_regex=NON_LLM)


def test_the_served_document_is_the_one_tested(client: Any) -> None:
    served = client.get("/openapi.json")
    assert served.status_code == 200
    assert served.json()["paths"].keys() == create_app(load_settings({})).openapi()["paths"].keys()


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    upstream = FakeUpstream()
    with ServerThread(upstream.app()) as fake:
        settings = load_settings({"upstream": fake.url + "/v1", "traces_path": ":memory:"})
        with ServerThread(create_app(settings)) as proxy:
            yield proxy.url


@schema.parametrize()
def test_non_llm_endpoints_hold_to_their_openapi_document(case: Any, served: str) -> None:
    case.call_and_validate(base_url=served)
