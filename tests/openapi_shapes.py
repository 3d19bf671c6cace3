"""The OpenAI OpenAPI spec's component schemas (tests/data/openai_openapi, see its SOURCE.md) as JSON Schema
validators, and the official SDKs' own models in strict mode: what every answer and chunk is checked against."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from pydantic import TypeAdapter

DATA = Path(__file__).resolve().parent / "data" / "openai_openapi" / "schemas.json"


def _nullable(node: Any) -> Any:
    """The spec's OpenAPI 3.0 style `nullable: true` as JSON Schema's "or null"."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


@cache
def _document() -> dict[str, Any]:
    return {"components": _nullable(orjson.loads(DATA.read_bytes())["components"])}


@cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({**_document(), "$ref": f"#/components/schemas/{name}"})


def check(name: str, payload: Any) -> None:
    """Assert `payload` is valid under the spec's schema `name` (every error listed)."""
    errors = sorted(validator(name).iter_errors(payload), key=lambda e: list(e.absolute_path))
    assert not errors, f"not a valid {name}:\n" + "\n".join(
        f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors[:10])


def strict(model: Any, payload: Any) -> Any:
    """The SDK's own model (a pydantic class or an annotated union) validated in strict mode."""
    if hasattr(model, "model_validate"):
        return model.model_validate(payload, strict=True)
    return TypeAdapter(model).validate_python(payload, strict=True)


@cache
def _members(union: str) -> dict[str, str]:
    """The schemas of a union of events (`anyOf` of $refs), by the `type` each one's `type` enum names."""
    schemas = _document()["components"]["schemas"]
    out: dict[str, str] = {}
    for member in schemas[union].get("anyOf") or schemas[union].get("oneOf") or []:
        name = member["$ref"].split("/")[-1]
        kind = schemas[name].get("properties", {}).get("type", {})
        for value in kind.get("enum") or ([kind["const"]] if "const" in kind else []):
            out[value] = name
    return out


def check_event(union: str, event: dict[str, Any]) -> None:
    """Assert `event` is valid under the member of `union` its `type` names (the error then names the field)."""
    name = _members(union).get(event.get("type"))  # type: ignore[arg-type]
    assert name is not None, f"{event.get('type')!r} is not an event of {union}"
    check(name, event)
