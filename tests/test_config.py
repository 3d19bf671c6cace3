"""config.py: settings come from flags, then the environment, then the TOML file, then the defaults; an invalid
one is a one-line SettingsError naming it that never shows a key; URLs are shown without their credentials.
(Every setting against config.example.toml: tests/test_config_example.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from sanctum_proxy.config import SettingsError, load_settings, redacted_url


def test_flags_win_over_env_which_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "sanctum.toml"
    config.write_text('port = 9001\nmax_repair_rounds = 4\nprompt_format = "mistral"\n')
    monkeypatch.setenv("SANCTUM_MAX_REPAIR_ROUNDS", "3")
    monkeypatch.setenv("SANCTUM_PROMPT_FORMAT", "glm")
    settings = load_settings({"prompt_format": "kimi", "port": None}, config)
    assert (settings.port, settings.max_repair_rounds, settings.prompt_format) == (9001, 3, "kimi")
    monkeypatch.delenv("SANCTUM_MAX_REPAIR_ROUNDS")
    assert load_settings(None, config).max_repair_rounds == 4
    assert load_settings().port != 9001


def test_an_invalid_setting_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SANCTUM_PORT", "not-a-port")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value).startswith("invalid setting 'port'")
    assert "\n" not in str(caught.value)
    with pytest.raises(SettingsError, match="no such file"):
        load_settings(config_file=tmp_path / "missing.toml")


def test_a_key_is_never_shown_in_the_error(tmp_path: Path) -> None:
    config = tmp_path / "sanctum.toml"
    config.write_text('upstream_api_key = 12\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(config_file=config)
    assert "12" not in str(caught.value).replace("'upstream_api_key'", "")


def test_redacted_url_drops_credentials_and_the_query() -> None:
    assert redacted_url("http://user:pa/ss@host:8080/v1") == "http://***@host:8080/v1"
    assert redacted_url("http://host/v1?api_key=sk-1") == "http://host/v1?***"
    assert redacted_url("http://host/v1#frag") == "http://host/v1#***"
    assert redacted_url("http://host/v1") == "http://host/v1"
