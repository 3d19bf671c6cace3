"""/v1/messages and its neighbours answer as Anthropic's API does, for what agents send (issue 29): refused
server-side state (`thread` with the error the SDK's tool runner recovers from), client-only fields kept from the
upstream (`output_config`'s schema as `response_format`), `max_tokens` required, the model named the same streamed
or not, count_tokens, HEAD /, GET /v1/models in Anthropic's shape and Anthropic's error types."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageTokensCount, ModelInfo

from sanctum_proxy import errors
from sanctum_proxy.protocols import messages_api
from tests.fakes.upstream import Step, completion, content_chunks

ASK: dict[str, Any] = {"model": "m", "max_tokens": 200, "messages": [{"role": "user", "content": "Hi"}]}
TITLE_SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"],
                "additionalProperties": False}


def sdk(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)


@pytest.mark.parametrize("thread", [{"type": "create"}, {"type": "continue", "previous_message_id": "msg_1"}])
def test_thread_is_refused_as_anthropic_refuses_what_threads_cannot_serve(proxy, fake, thread):
    with sdk(proxy) as client, pytest.raises(anthropic.BadRequestError) as caught:
        client.beta.messages.create(**ASK, extra_body={"thread": thread})
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and error["details"] == {"error_code": "thread_unsupported_request"}
    assert type(caught.value).__name__ == "ThreadUnsupportedRequestError" and fake[0].requests == []


@pytest.mark.parametrize("field", [{"container": "cntr_1"}, {"compaction": {"type": "auto"}},
                                   {"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}])
def test_other_server_state_is_refused_naming_the_field(proxy, fake, field):
    r = httpx.post(proxy + "/v1/messages", json={**ASK, **field})
    assert r.status_code == 400 and r.json()["error"]["param"] == next(iter(field)) and fake[0].requests == []


def test_output_config_schema_becomes_response_format_and_client_only_fields_stay_here(proxy, fake):
    fake[0].push(Step(body=completion('{"title": "Greeting"}')))
    client_only = {"metadata": {"user_id": "u"}, "speed": "fast", "diagnostics": {"previous_message_id": "msg_1"},
                   "fallbacks": "default", "cache_control": {"type": "ephemeral"}, "inference_geo": "us",
                   "billing_policy": {"type": "billing_policy", "bill_to": "self"}, "service_tier": "auto",
                   "fallback_credit_token": "t", "thinking": {"type": "adaptive"}, "context_management": {}}
    body = {**ASK, **client_only, "thread": None,
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": TITLE_SCHEMA}}}
    r = httpx.post(proxy + "/v1/messages", json=body)
    assert r.status_code == 200 and r.json()["content"][0]["text"] == '{"title": "Greeting"}'
    sent = fake[0].requests[0]
    assert sent["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": TITLE_SCHEMA, "strict": True}}
    assert not set(sent) & {*client_only, "output_config", "thread"}


@pytest.mark.parametrize("bad", [{"type": "json_schema"}, {"type": "text"}, "json"])
def test_an_output_format_that_is_not_a_json_schema_is_refused(proxy, fake, bad):
    r = httpx.post(proxy + "/v1/messages", json={**ASK, "output_config": {"format": bad}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "output_config.format" and fake[0].requests == []


@pytest.mark.parametrize("max_tokens", [None, "ten", -5, 0, 1.5, True])
def test_max_tokens_is_required_as_a_positive_integer(proxy, fake, max_tokens):
    body = {k: v for k, v in ASK.items() if k != "max_tokens"}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    r = httpx.post(proxy + "/v1/messages", json=body)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["param"] == "max_tokens"
    assert fake[0].requests == []


def test_streamed_and_unstreamed_messages_name_the_model_the_client_asked_for(proxy, fake):
    fake[0].push(Step(body=completion("Hello.", model="upstream-name")),
                 Step(chunks=[{**c, "model": "upstream-name"} for c in content_chunks("Hello.")]))
    with sdk(proxy) as client:
        plain = client.messages.create(**ASK)
        with client.messages.stream(**ASK) as streaming:
            streamed = streaming.get_final_message()
    assert plain.model == streamed.model == "m"


def test_an_upstream_timeout_is_an_anthropic_timeout_error(make_proxy, fake):
    proxy = make_proxy(read_timeout=0.3)
    fake[0].push(Step(body=completion("late"), delay=1.5))
    r = httpx.post(proxy + "/v1/messages", json=ASK, timeout=20)
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"
    fake[0].push(Step(body=completion("late"), delay=1.5))
    r = httpx.post(proxy + "/v1/messages", json={**ASK, "stream": True}, timeout=20)  # failed before the stream began
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (402, "billing_error"),
    (403, "permission_error"), (404, "not_found_error"), (413, "request_too_large"), (429, "rate_limit_error"),
    (500, "api_error"), (502, "api_error"), (503, "api_error"), (504, "timeout_error"), (529, "overloaded_error")])
def test_upstream_statuses_get_anthropics_documented_error_types(status, kind):
    error = errors.UpstreamError(status, "upstream says no")
    assert messages_api.error_body(error)["error"]["type"] == kind


def test_count_tokens_is_llama_cpps_count_of_the_templated_prompt(proxy, fake):
    fake[0].tokenizer = True
    body = {"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "one two three"}]}
    with sdk(proxy) as client:
        got = client.messages.with_raw_response.count_tokens(**body)
    assert got.headers["x-sanctum-token-count"] == "exact"
    # "<|system|> Be brief." "<|user|> one two three" "<|assistant|>": 3 + 4 + 1 words
    assert MessageTokensCount.model_validate(got.parse()).input_tokens == 8
    assert fake[0].templated[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert fake[0].requests == []


def test_count_tokens_elsewhere_is_an_estimate_and_errors_are_anthropics(proxy, fake):
    with sdk(proxy) as client:
        got = client.messages.with_raw_response.count_tokens(model="m",
                                                             messages=[{"role": "user", "content": "x" * 400}])
        assert got.headers["x-sanctum-token-count"] == "estimate" and 100 <= got.parse().input_tokens <= 130
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.count_tokens(model="m", messages=[])
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    r = httpx.post(proxy + "/v1/messages/count_tokens", content=b"not json")
    assert r.status_code == 400 and r.json()["type"] == "error"


def test_head_root_is_200(proxy):
    r = httpx.head(proxy + "/")
    assert r.status_code == 200


def test_models_in_anthropics_shape_when_the_client_speaks_anthropic(proxy, fake):
    with sdk(proxy) as client:
        models = list(client.models.list())
        page = client.models.with_raw_response.list().http_response.json()
    assert [m.id for m in models] == ["fake-model"] and all(isinstance(m, ModelInfo) for m in models)
    assert page["first_id"] == page["last_id"] == "fake-model" and page["has_more"] is False
    assert page["data"][0]["type"] == "model" and page["data"][0]["display_name"] == "fake-model"
    openai_shape = httpx.get(proxy + "/v1/models").json()
    assert openai_shape == {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}


def test_one_model_in_anthropics_shape_and_an_unknown_one_is_not_found(proxy, fake):
    with sdk(proxy) as client:
        model = client.models.retrieve("fake-model")
        with pytest.raises(anthropic.NotFoundError) as caught:
            client.models.retrieve("claude-opus-4")
    assert isinstance(model, ModelInfo) and model.id == "fake-model" and model.type == "model"
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    passed = httpx.get(proxy + "/v1/models/fake-model")  # without anthropic-version: the upstream's own answer
    assert passed.json()["path"] == "/v1/models/fake-model"
