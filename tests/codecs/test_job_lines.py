"""codecs/job_lines.py: a key-value line (`read_file file="C:\\..."`, Qwen3.5 through Ollama; its thread was not found)
and a tag named after a tool's job (`<terminal_command>ls -la</terminal_command>`), read for one offered tool and
its one required string parameter; anything else stays text or gets a question naming the tool."""

from __future__ import annotations

import json

from sanctum_proxy.codecs import job_lines
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.streaming import Assembler, with_tools
from sanctum_proxy.repair.toolbox import Toolbox


def _tool(name: str, *required: str, optional: tuple[str, ...] = ()) -> JSONObject:
    props: JSONObject = {k: {"type": "string"} for k in (*required, *optional)}
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": list(required)}}}


BOOK = Toolbox.from_tools([_tool("read_file", "path", optional=("encoding",)), _tool("run_terminal_command", "command"),
                           _tool("edit", "path", "old", "new")])


def read(text: str) -> tuple[list[tuple[str, object]], str | None, list[str]]:
    out = assess({"role": "assistant", "content": text}, BOOK)
    return [(c.name, json.loads(c.arguments)) for c in out.calls], out.content, [p.reason for p in out.problems]


def test_a_key_value_line_gives_its_value_to_the_tools_one_required_string() -> None:
    text = 'Let me look.\nread_file file="C:\\Users\\me\\notes.txt"'
    assert read(text) == ([("read_file", {"path": "C:\\Users\\me\\notes.txt"})], "Let me look.", [])


def test_a_key_the_tool_has_is_kept() -> None:
    assert read('read_file path="a.txt"') == ([("read_file", {"path": "a.txt"})], None, [])


def test_a_tag_named_after_the_tools_job_is_its_call() -> None:
    assert read("<terminal_command>ls -la</terminal_command>") == (
        [("run_terminal_command", {"command": "ls -la"})], None, [])


def test_prose_and_unknown_names_stay_text() -> None:
    for text in ('Use read_file file="a.txt" for that.', 'cat file="a.txt"', "<div>ls</div>", "<terminal>ls"):
        assert read(text) == ([], text, [])


def test_a_tool_with_several_required_values_gets_a_question_naming_it() -> None:
    calls, content, problems = read("<edit>x</edit>")
    assert (calls, content, problems) == ([], None, ["invalid_arguments"])


def test_a_tag_two_tools_could_own_is_no_ones() -> None:
    assert "bash" not in job_lines.tag_owners(frozenset({"bash", "run_bash"}))


def test_streamed_the_markup_never_shows() -> None:
    texts = ('read_file file="C:\\a.txt"', 'Looking.\nread_file file="a"', "<terminal_command>ls</terminal_command>")
    for text in texts:
        for size in (1, 3):
            names = BOOK.name_set
            assembler = Assembler(starts=with_tools(names), names=names)
            live = "".join(assembler.feed({"choices": [{"index": 0, "delta": {"content": text[i : i + size]},
                                                        "finish_reason": None}]}) for i in range(0, len(text), size))
            assert "file=" not in live and "<terminal" not in live, (text, size, live)


def test_prose_opening_a_line_with_a_tools_name_streams_on() -> None:
    for text in ("read_file is what I would use, then more prose", "Sure.\nread_file is the tool. More prose"):
        names = BOOK.name_set
        assembler = Assembler(starts=with_tools(names), names=names)
        live = "".join(assembler.feed({"choices": [{"index": 0, "delta": {"content": text[i : i + 3]},
                                                    "finish_reason": None}]}) for i in range(0, len(text), 3))
        assert "read_file is" in live, (text, live)
