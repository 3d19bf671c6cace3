"""Settings, read from flags > env (SANCTUM_*) > TOML file > defaults, never at import."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sanctum_proxy.codecs.families import PromptFormat
from sanctum_proxy.core.shapes import JSONObject

ToolCalling = Literal["native", "prompted", "auto"]
Surrender = Literal["error", "content", "last_call"]


class UpstreamConfig(BaseModel):
    """One `[[upstreams]]` entry: a named pool of identical servers and its models."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    urls: list[str] = Field(min_length=1, description="base URLs with /v1; several = a pool of equal backends")
    api_key: str | None = None
    models: list[str] = Field(default_factory=list, description='names or globs; empty or "*" = every model')
    aliases: dict[str, str] = Field(default_factory=dict, description="client model -> upstream model")

    @model_validator(mode="before")
    @classmethod
    def _url_is_one_url(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("urls"), str):
            value = {**value, "urls": [value["urls"]]}
        if isinstance(value, dict) and "url" in value:
            value = {**value, "urls": [value["url"]] + list(value.get("urls") or [])}
            del value["url"]
        return value

    @field_validator("urls")
    @classmethod
    def _urls_are_http(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"must be http:// or https:// URLs, got {redacted_url(url)!r}")
        return [url.rstrip("/") for url in value]

    @property
    def catch_all(self) -> bool:
        return not self.models or "*" in self.models


class Settings(BaseSettings):
    """Every setting (described in config.example.toml); TOML keys and SANCTUM_<NAME> share its names."""

    model_config = SettingsConfigDict(env_prefix="SANCTUM_", extra="forbid", validate_default=True)

    upstream: str = Field("http://127.0.0.1:11434/v1", description="OpenAI-compatible base URL with /v1")
    host: str = "127.0.0.1"
    port: int = Field(8100, ge=0, le=65535)
    workers: int = Field(1, ge=1, le=64, description="server processes; more than 1 shares the port")
    spell_calling: ToolCalling = "auto"
    max_repair_rounds: int = Field(2, ge=0, le=10)
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    # what the client gets after the last repair round, per endpoint
    on_surrender: Surrender = "last_call"
    messages_on_surrender: Surrender = "last_call"
    responses_on_surrender: Surrender = "last_call"
    ollama_on_surrender: Surrender = "last_call"
    prompt_format: PromptFormat = "auto"
    prompt_formats: dict[str, PromptFormat] = Field(default_factory=dict)
    constrain: Literal["off", "repair", "always"] = "repair"
    reasoning_format: Literal["keep", "split"] = "keep"
    correction_context: Literal["transcript", "fresh"] = "transcript"
    follow_up_calls: bool = False
    upstream_api_key: str | None = None
    forward_client_key: bool = False
    api_keys: list[str] = Field(default_factory=list)
    api_keys_file: str | None = None
    admin_key: str | None = None
    cors_origins: list[str] = Field(default_factory=list)
    # `Host` names besides loopback (globs)
    allowed_hosts: list[str] = Field(default_factory=list)
    max_messages: int = Field(2048, ge=1)
    max_tools: int = Field(128, ge=1)
    max_concurrent_requests: int = Field(256, ge=0)
    # unset: half of max_concurrent_requests
    max_concurrent_per_key: int | None = Field(None, ge=1)
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    health_check_seconds: float = Field(10.0, gt=0)
    redis_url: str | None = None
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(300.0, gt=0)
    max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_answer_bytes: int = Field(32 * 1024 * 1024, gt=0)
    max_repair_bytes: int = Field(64 * 1024, ge=1024, description="call text above this is not repaired locally")
    max_grammar_bytes: int = Field(1024 * 1024, ge=4096, description="a larger GBNF grammar is not sent")
    max_models: int = Field(1024, ge=16, description="(upstream, model) rows kept for auto mode and capabilities")
    probes_per_minute: int = Field(30, ge=1, description="capability probes of new models, all upstreams together")
    body_read_timeout: float = Field(30.0, gt=0, description="seconds a client may take to send its body")
    header_read_timeout: float = Field(10.0, gt=0, description="seconds a client may take to send its headers")
    max_head_bytes: int = Field(64 * 1024, ge=4096, description="a longer request head is refused (431)")
    answer_write_timeout: float = Field(60.0, gt=0, description="seconds a client may take none of an answer")
    # unset: half the open-file limit
    max_connections: int | None = Field(None, ge=8)
    probe_capabilities: bool = True
    # Ollama chat rounds go to its /api/chat; off: its /v1
    ollama_native: bool = True
    # a longer request gets options.num_ctx raised, up to ollama_max_num_ctx
    ollama_default_num_ctx: int = Field(4096, ge=256)
    ollama_max_num_ctx: int = Field(65536, ge=256)
    probe_timeout: float = Field(3.0, gt=0)
    auto_recheck_seconds: float | None = Field(None, gt=0)
    parse_failure_threshold: int = Field(3, ge=1)
    parse_failure_window_seconds: float = Field(600.0, gt=0)
    parse_failure_flip_seconds: float = Field(3600.0, gt=0)
    keepalive_seconds: float = Field(10.0, gt=0)
    embedded: bool = False
    traces_path: str | None = Field(None, description="SQLite file or :memory:; unset: the XDG state dir")
    traces_max_count: int = Field(5000, ge=0)
    traces_max_age_hours: float = Field(168.0, gt=0)
    traces_max_bytes: int = Field(256 * 1024 * 1024, ge=65_536)
    traces_max_doc_bytes: int = Field(1024 * 1024, ge=4096)
    traces_bodies: bool = True
    traces_queue_bytes: int = Field(32 * 1024 * 1024, ge=0, description="request bytes of traces waiting to be "
                                    "written; past it a trace is queued as metadata only")
    responses_api: Literal["repair", "pass"] = "repair"
    messages_api: Literal["repair", "pass"] = "repair"

    @field_validator("upstream")
    @classmethod
    def _upstream_is_http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("upstreams")
    @classmethod
    def _names_are_unique(cls, value: list[UpstreamConfig]) -> list[UpstreamConfig]:
        names = [u.name for u in value]
        if len(set(names)) != len(names):
            raise ValueError(f"upstream names must be unique, got {names}")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value or None

    @field_validator("api_keys_file")
    @classmethod
    def _keys_file_exists(cls, value: str | None) -> str | None:
        if value and not Path(value).is_file():
            raise ValueError("no such file")
        return value or None

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    def prompt_format_for(self, model: str) -> str:
        """The first `prompt_formats` pattern matching `model`, else `prompt_format`."""
        matching = (fmt for pattern, fmt in self.prompt_formats.items() if fnmatch.fnmatchcase(model, pattern))
        return next(matching, self.prompt_format)


def redacted_url(url: str) -> str:
    """The URL fit to log: credentials and any query masked, even when malformed."""
    head, mark, _ = url.partition("?") if "?" in url else url.partition("#")
    if "@" in head:
        start = head.index("://") + 3 if "://" in head.split("@", 1)[0] else 0
        head = f"{head[:start]}***@{head[head.rindex('@') + 1:]}"
    return f"{head}{mark}***" if mark else head


class SettingsError(ValueError):
    """An invalid setting; the message is one line naming it."""


def load_settings(flags: JSONObject | None = None, config_file: str | Path | None = None) -> Settings:
    """Build Settings with precedence flags > env > TOML file > default."""
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    if config_file is not None and not Path(config_file).is_file():
        raise SettingsError(f"invalid setting 'config': no such file {config_file}")
    toml_file = Path(config_file) if config_file else None

    class _FromSources(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            sources: list[PydanticBaseSettingsSource] = [InitSettingsSource(settings_cls, given), env_settings]
            if toml_file is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
            return tuple(sources)

    try:
        loaded = _FromSources()  # type: ignore[call-arg]
    except Exception as exc:  # validation or TOML syntax
        raise SettingsError(_one_line(exc)) from exc
    return Settings.model_construct(**dict(loaded))  # dict(): nested models stay models


_SECRETS = ("key", "keys", "api_key", "api_keys", "admin_key", "upstream_api_key")
_URLS = ("upstream", "urls", "url", "redis_url")  # shown redacted


def _one_line(exc: Exception) -> str:
    """The first error, naming the setting; its value shown unless it may hold a secret."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = [str(p) for p in first.get("loc", ())]
        name = ".".join(loc) or "settings"
        return f"invalid setting '{name}': {first.get('msg', exc)} ({_shown(loc, first.get('input'))})"
    return f"invalid setting 'config': {exc}".replace("\n", " ")


def _shown(loc: list[str], value: Any) -> str:
    if any(part in _SECRETS for part in loc) or not isinstance(value, str | int | float | bool | None):
        return "the value is not shown"  # a table or list may hold a key
    if isinstance(value, str) and (any(part in _URLS for part in loc) or "://" in value):
        return "got " + repr(redacted_url(value))
    return "got " + repr(value)
