"""The defaults written for people (the CLI's help, config.example.toml, the contract's `name = value` settings)
are the defaults of `Settings`: a changed default that one of them still shows the old way fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from sanctum_proxy import cli
from sanctum_proxy.config import Settings

ROOT = Path(__file__).resolve().parents[1]
FIELDS = Settings.model_fields


def default(name: str) -> Any:
    field = FIELDS[name]
    return field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]


def help_defaults() -> dict[str, str]:
    """Each flag's "(default X)" in its help, by setting name."""
    found = {}
    for action in cli.parser()._actions:
        said = re.search(r"\(default ([^;)]+?)(?:[;)]|: | \()", action.help or "")
        if said and action.dest in FIELDS:
            found[action.dest] = said.group(1).strip()
    return found


def test_the_help_shows_each_flags_default() -> None:
    shown = help_defaults()
    assert len(shown) >= 6
    wrong = {name: (text, default(name)) for name, text in shown.items() if text != str(default(name))}
    assert not wrong


def test_the_example_config_sets_the_defaults() -> None:
    example = tomllib.loads((ROOT / "config.example.toml").read_text())
    wrong = {name: (value, default(name)) for name, value in example.items()
             if name in FIELDS and not isinstance(value, dict) and value != default(name)}
    assert not wrong


UNITS = {"KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def written(value: str) -> Any:
    """A default as the contract writes it: `8 MiB`, `2`, `last_call`; None for prose ("half of ...")."""
    sized = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", value.strip())
    if sized:
        return int(sized.group(1)) * UNITS[sized.group(2)]
    word = value.strip()
    if word in ("true", "false"):
        return word == "true"
    if re.fullmatch(r"-?\d+(\.\d+)?", word):
        return float(word) if "." in word else int(word)
    return word if re.fullmatch(r"[a-z_]+", word) and not word.startswith("half") else None


def test_the_contracts_defaults_are_the_settings() -> None:
    """A setting in backticks followed closely by "default X" (or "(default: X"): X is its default."""
    text = (ROOT / "docs/contract.md").read_text()
    checked, wrong = 0, {}
    for name, value in re.findall(r"`([a-z_]+)`[^`.;]{0,30}?\(?default:? `?([^`),;]+)", text):
        said = written(value) if name in FIELDS else None
        if isinstance(said, str) and not isinstance(default(name), str):
            said = None  # prose ("empty", "unset") for a list or number default
        if said is not None:
            checked += 1
            if said != default(name):
                wrong[name] = (value, default(name))
    assert checked >= 2 and not wrong
