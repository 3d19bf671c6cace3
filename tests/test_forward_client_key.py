"""`forward_client_key`: where no `upstream_api_key` is set, the client's key goes to the upstream on every
kind of request the proxy sends there (chat rounds streamed or not, pass-through); a set upstream key wins;
off, the client's key never leaves the proxy (config.example.toml says the same)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ServerThread
from tests.fakes.upstream import Step, completion, content_chunks

ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def recorded(fake: Any) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """The fake upstream behind a recorder of each request's path and Authorization header."""
    seen: list[tuple[str, str | None]] = []
    app = fake[0].app()

    async def recording(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            assert b"x-api-key" not in headers  # a client's x-api-key travels, if at all, as Authorization
            seen.append((scope["path"], headers.get(b"authorization", b"").decode() or None))
        await app(scope, receive, send)

    with ServerThread(recording) as upstream:
        yield upstream.url + "/v1", seen


def exchange(proxy: str, fake: Any, headers: dict[str, str]) -> None:
    fake[0].push(Step(body=completion("plain")), Step(chunks=content_chunks("streamed")))
    assert httpx.post(f"{proxy}/v1/chat/completions", json=ASK, headers=headers, timeout=20).status_code == 200
    streamed = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "stream": True}, headers=headers, timeout=20)
    assert streamed.status_code == 200 and b"[DONE]" in streamed.content
    assert httpx.get(f"{proxy}/v1/models", headers=headers, timeout=20).status_code == 200


@pytest.mark.parametrize("sent", [{"authorization": "Bearer client-key"}, {"x-api-key": "client-key"}])
def test_forwarded_the_client_key_reaches_the_upstream_on_every_request(make_proxy, fake, recorded, sent):
    upstream, seen = recorded
    proxy = make_proxy(upstream=upstream, forward_client_key=True, probe_capabilities=False)
    exchange(proxy, fake, sent)
    paths = [path for path, _ in seen]
    assert paths.count("/v1/chat/completions") == 2 and "/v1/models" in paths
    assert {auth for _, auth in seen} == {"Bearer client-key"}


def test_forwarded_a_set_upstream_key_wins(make_proxy, fake, recorded):
    upstream, seen = recorded
    proxy = make_proxy(upstream=upstream, forward_client_key=True, upstream_api_key="proxy-key",
                       probe_capabilities=False)
    exchange(proxy, fake, {"authorization": "Bearer client-key"})
    assert len(seen) >= 3 and {auth for _, auth in seen} == {"Bearer proxy-key"}


def test_not_forwarded_the_upstream_gets_its_own_key_and_never_the_clients(make_proxy, fake, recorded):
    upstream, seen = recorded
    proxy = make_proxy(upstream=upstream, upstream_api_key="proxy-key", probe_capabilities=False)
    exchange(proxy, fake, {"authorization": "Bearer client-key"})
    assert len(seen) >= 3 and {auth for _, auth in seen} == {"Bearer proxy-key"}


@pytest.mark.parametrize("sent", [{"authorization": "Bearer client-key"}, {"x-api-key": "client-key"}])
def test_not_forwarded_and_no_upstream_key_nothing_is_sent(make_proxy, fake, recorded, sent):
    upstream, seen = recorded
    proxy = make_proxy(upstream=upstream, probe_capabilities=False)
    exchange(proxy, fake, sent)
    assert len(seen) >= 3 and {auth for _, auth in seen} == {None}
