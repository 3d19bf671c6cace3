"""What the round loop knows about one request, settled before the first round."""

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

    body: JSONObject
    book: Toolbox | None  # None: no tools offered
    mode: Mode
    auto: bool
    max_rounds: int
    on_surrender: str = "error"
    prompt_format: str = "hermes"
    upstream: str = ""
    new_id: Callable[[], str] | None = None
    opening_omens: tuple[om.Omen, ...] = ()  # from a probe before the first round
    constrain: cn.Constrain = "off"
    correction_context: Literal["transcript", "fresh"] = "transcript"
    grammar: bool = False  # the upstream takes a GBNF `grammar` (llama.cpp)
    tool_choice: bool = True  # False: the upstream refused tool_choice "required" before
    native_calls: bool | None = None  # False: the template drops tools (llama.cpp --jinja)
    max_repair_bytes: int = 64 * 1024  # longer call text goes to tier 2
    max_grammar_bytes: int = 1024 * 1024
    follow_up_calls: bool = False
    forbidden: Toolbox | None = None  # tools offered with tool_choice "none": their calls are only taken out
    surrendered_ago: float | None = None  # seconds since this same request last surrendered (then: one round)
    memo_key: bytes | None = None  # its digest in the surrender memo (state/surrendered.py), once taken

    @property
    def read_names(self) -> frozenset[str]:
        """The tool names whose calls a stream holds back: offered, or forbidden."""
        book = self.book or self.forbidden
        return book.name_set if book is not None else frozenset()

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def parallel(self) -> bool:
        return self.body.get("parallel_tool_calls") is not False

    @property
    def required(self) -> str | None:
        """"any" for tool_choice required, a name for a named choice, else None."""
        choice = self.body.get("tool_choice")
        if choice == "required":
            return "any"
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return str(name) if name else None
        return None

    @property
    def new_ids(self) -> dict[str, Callable[[], str]]:
        """mend.assess's `new_id` keyword, where the plan has one."""
        return {"new_id": self.new_id} if self.new_id else {}
