"""json_repair as the last resort: it mends what the rules cannot, and refuses to invent or to pass its budgets."""

from __future__ import annotations

import pytest

from sanctum_proxy.core.decoded_json import Decoded, Undecodable
from sanctum_proxy.core.json_fallback import MAX_FALLBACK_CHARS, by_json_repair, fallback_budget


@pytest.mark.parametrize(("text", "value"), [
    ('{"city": "Paris" "unit": "c"}', {"city": "Paris", "unit": "c"}),  # a comma left out between members
    ('{"a": [1, 2}', {"a": [1, 2]}),  # an array never closed
])
def test_what_the_rules_cannot_mend_is_mended_and_named(text: str, value: object) -> None:
    assert by_json_repair(text, {"code_fence": None}) == Decoded(value, ("code_fence", "json_repair"))


@pytest.mark.parametrize(("text", "why"), [
    ('{"a": ', "invent"),
    ('{"a": "open', "cut off"),
    ("[" * 300, "nested too deeply"),
    ('{"a": [1, 2}' + " " * MAX_FALLBACK_CHARS, "beyond the local rules"),
])
def test_inventing_cutting_and_oversized_text_are_refused(text: str, why: str) -> None:
    out = by_json_repair(text, {})
    assert isinstance(out, Undecodable) and why in out.why


def test_an_answer_budget_refuses_text_past_what_is_left() -> None:
    with fallback_budget(20):
        assert by_json_repair('{"a": [1, 2}', {}) == Decoded({"a": [1, 2]}, ("json_repair",))
        out = by_json_repair('{"a": [1, 2}', {})
    assert isinstance(out, Undecodable) and "over the 20 characters" in out.why and "per answer" in out.why
    assert isinstance(by_json_repair('{"a": [1, 2}', {}), Decoded)
