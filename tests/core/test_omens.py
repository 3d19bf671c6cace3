"""core/omens.py: what an omen looks like to a client: its JSON, the header summary, the SSE comment and event,
the omens of choice n, and a stream's held omens sent once each."""

from __future__ import annotations

import json

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.calls import Problem, Repair

REPAIR = Repair("get_weather", "call_1", ("trailing_comma",), '{"city": "Paris",}')
PROBLEM = Problem("unknown_spell", "get_time", ("unknown tool 'get_time'",), '{"name": "get_time"}')


def test_an_omen_as_json() -> None:
    assert om.repaired(1, REPAIR).to_json() == {"type": "SpellCallRepaired", "round": 1, "spell": "get_weather",
                                                "call_id": "call_1", "repairs": ["trailing_comma"],
                                                "raw": '{"city": "Paris",}'}
    assert om.rejected(2, PROBLEM, "Call one of: get_weather").to_json()["details"] == ["unknown tool 'get_time'"]


def test_header_summary_counts_in_first_seen_order() -> None:
    omens = [om.rejected(1, PROBLEM, "c"), om.repaired(2, REPAIR), om.rejected(2, PROBLEM, "c")]
    assert om.header_summary(omens) == "SpellCallRejected=2, SpellCallRepaired=1"
    assert om.header_summary([]) == ""


def test_sse_comment_and_event() -> None:
    omen = om.surrendered(3, "gave up", ["raw"])
    comment = om.sse_comment(omen)
    assert comment.startswith(b": omen ") and comment.endswith(b"\n\n")
    assert json.loads(comment[len(b": omen "):]) == omen.to_json()
    event = om.sse_event(omen)
    head, data = event.rstrip(b"\n").split(b"\n")
    assert head == b"event: omen"
    assert json.loads(data.removeprefix(b"data: ")) == {"object": "sanctum.omen", "choices": [], **omen.to_json()}


def test_an_omen_of_another_choice_names_it() -> None:
    omen = om.repaired(1, REPAIR)
    assert om.of_choice(omen, 0) is omen
    assert om.of_choice(omen, 2).fields["choice"] == 2
    assert "choice" not in omen.fields


def test_held_omens_go_out_once_each() -> None:
    held = om.Held(render=lambda o: str(o.round).encode())
    held.hold(om.repaired(1, REPAIR))
    held.hold(om.repaired(2, REPAIR))
    assert held.due() == [b"1", b"2"]
    assert held.due() == []
    held.hold(om.repaired(3, REPAIR))
    assert held.due() == [b"3"]
    assert om.sanctum_object("native", 3, held.omens, "t1")["omens"][2]["round"] == 3
