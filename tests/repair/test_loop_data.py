"""repair/loop_data.py: usage over rounds and choices: every count added, nested details too, other fields kept as
first seen; the first round's usage copied, not shared."""

from __future__ import annotations

from typing import Any, cast

from sanctum_proxy.core.shapes import Usage
from sanctum_proxy.repair.loop_data import added, summed_usage


def test_counts_and_nested_details_are_summed_other_fields_kept() -> None:
    first = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
             "prompt_tokens_details": {"cached_tokens": 4}, "vendor": "a"}
    second = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27,
              "prompt_tokens_details": {"cached_tokens": 6, "audio_tokens": 1}, "vendor": "b", "extra": True}
    assert summed_usage(first, second) == {
        "prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42,
        "prompt_tokens_details": {"cached_tokens": 10, "audio_tokens": 1}, "vendor": "a", "extra": True}


def test_booleans_are_not_counts() -> None:
    assert summed_usage({"flag": True}, {"flag": True}) == {"flag": True}


def test_added_copies_the_first_round_and_skips_a_round_without_usage() -> None:
    first: dict[str, Any] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                             "completion_tokens_details": {"reasoning_tokens": 1}}
    total = added(None, cast(Usage, first))
    assert total is not None
    assert total == first
    assert total is not first
    first["completion_tokens_details"]["reasoning_tokens"] = 99
    assert total.get("completion_tokens_details") == {"reasoning_tokens": 1}
    assert added(total, None) is total
    after = added(total, cast(Usage, {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}))
    assert after is not None and (after["prompt_tokens"], after["total_tokens"]) == (2, 5)
