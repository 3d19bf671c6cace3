"""What the round loop needs to know about one request, settled before the first round."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sanctum_proxy.core import omens as om
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.events import Mode
from sanctum_proxy.repair.toolbox import Toolbox


@dataclass(frozen=True)
class Plan:
    """What the loop needs to know about the request, settled before the first round."""

    body: JSONObject
    book: Toolbox | None  # None: no tools offered
    mode: Mode
    auto: bool
    max_rounds: int
    on_surrender: str = "error"
    prompt_format: str = "hermes"
    upstream: str = ""
    new_id: Callable[[], str] | None = None
    opening_omens: tuple[om.Omen, ...] = ()  # decided before the first round (a probe)
    constrain: cn.Constrain = "off"
    correction_context: Literal["transcript", "fresh"] = "transcript"  # fresh: JSON-prompt rounds, no transcript
    grammar: bool = False  # the upstream takes a GBNF `grammar` (llama.cpp): prompted corrections use one
    tool_choice: bool = True  # False: the upstream refused tool_choice "required" before (native corrections
    # then go unconstrained, with the transcript still)
    native_calls: bool | None = None  # the model's template takes tools (probed); False: it drops them (llama.cpp
    # --jinja, silently), so tool_choice holds nothing and a native correction round goes prompted instead
    max_repair_bytes: int = 64 * 1024  # call text longer than this is not mended locally (tier 2 instead)
    max_grammar_bytes: int = 1024 * 1024  # a larger grammar is not sent: the correction round goes unconstrained
    follow_up_calls: bool = False  # constrain "always": after one call, MORE rounds, one call each (follow_up.py)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def parallel(self) -> bool:
        return self.body.get("parallel_tool_calls") is not False

    @property
    def required(self) -> str | None:
        """"any" for tool_choice required, a tool name for a named choice, else None."""
        choice = self.body.get("tool_choice")
        if choice == "required":
            return "any"
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None

    @property
    def new_ids(self) -> dict[str, Callable[[], str]]:
        """The keyword that gives tier 1 this plan's call-id maker, where it has one (mend.assess)."""
        return {"new_id": self.new_id} if self.new_id else {}
