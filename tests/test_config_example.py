"""config.example.toml is the settings reference: it lists every setting of `Settings` (set, or commented out
where there is no sensible default to show), names nothing else, and loads as it is."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from sanctum_proxy.config import Settings, SettingsError, load_settings

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.toml"


def listed() -> set[str]:
    """Top-level keys and tables, set or commented out (`# key = ...`, `# [table]`, `# [[table]]`). The keys
    of a table belong to it: after a real header all of them, after a commented one up to the next line that is
    not a comment."""
    names = set()
    real_table = commented_table = False
    for line in EXAMPLE.read_text().splitlines():
        commented = line.startswith("# ")
        bare = line[2:] if commented else line
        if not commented:  # a blank or real line ends a commented-out table
            commented_table = False
        header = re.fullmatch(r"\[\[?([a-z_]+)\]\]?", bare.strip())
        if header:
            names.add(header.group(1))
            real_table = real_table or not commented
            commented_table = commented
            continue
        key = re.match(r"([a-z_]+) = ", bare)
        if key and not real_table and not commented_table:
            names.add(key.group(1))
    return names


def test_every_setting_is_listed() -> None:
    missing = set(Settings.model_fields) - listed()
    assert not missing, f"config.example.toml does not list {sorted(missing)}"


def test_nothing_else_is_listed() -> None:
    unknown = listed() - set(Settings.model_fields)
    assert not unknown, f"config.example.toml lists {sorted(unknown)}, which are not settings"


def test_the_example_loads_as_it_is_and_uncommented() -> None:
    load_settings(config_file=EXAMPLE)
    tomllib.loads(EXAMPLE.read_text())  # and as plain TOML


def test_an_invalid_setting_is_named_without_showing_a_secret(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    for text, shown, hidden in (
            ('upstream = "ftp://user:hunter2@host/v1"', "ftp://***@host/v1", "hunter2"),
            ("upstream_api_key = 12345678901", "not shown", "12345678901"),
            ('api_keys = "sk-secret-one"', "not shown", "sk-secret-one"),
            ("port = 99999999", "99999999", None),
            ('[[upstreams]]\napi_key = "sk-in-a-table"', "not shown", "sk-in-a-table")):
        bad.write_text(text + "\n")
        with pytest.raises(SettingsError) as caught:
            load_settings(config_file=bad)
        message = str(caught.value)
        named = text.split(" = ")[0].split("\n")[0].strip("[]")
        assert f"'{named}" in message and shown in message and "\n" not in message
        assert hidden is None or hidden not in message
