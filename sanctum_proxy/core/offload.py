"""Which steps leave the event loop for a small thread pool, and at what sizes."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import orjson

from sanctum_proxy.core.shapes import JSONObject

if TYPE_CHECKING:  # sizes only
    from sanctum_proxy.repair.loop_data import Answer, Plan

OFFLOAD_WORKERS = 4
P = ParamSpec("P")
T = TypeVar("T")
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(OFFLOAD_WORKERS, thread_name_prefix="sanctum-cpu")
        return _pool


async def offloaded(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


async def off_loop_if(heavy: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """On the CPU pool when `heavy`, else inline."""
    return await offloaded(fn, *args, **kwargs) if heavy else fn(*args, **kwargs)


# Below these, the hop to the pool costs more than the step.
INLINE_PARSE_BYTES = 256 * 1024
INLINE_TOOLS_BYTES = 4096
TOOL_LISTS_KEPT = 256
TOOL_LIST_KEY_BYTES = 256 * 1024
_READ_TOOLS: OrderedDict[bytes, None] = OrderedDict()
INLINE_ANSWER_CHARS = 4096
INLINE_ROUND_SCHEMA_BYTES = 64 * 1024
INLINE_CHECKED_SCHEMA_BYTES = 4096


def heavy_body(raw: bytes) -> bool:
    """Whether decoding may take milliseconds."""
    return len(raw) > INLINE_PARSE_BYTES


def tools_key(raw: bytes, body: JSONObject, door: str) -> bytes | None:
    """Its key where checking the tool list may cost (b"": too deep to key)."""
    tools = len(raw) > INLINE_TOOLS_BYTES and (b'"tools"' in raw or b'"functions"' in raw)
    if not tools and b'"pattern' not in raw:
        return None
    try:
        return orjson.dumps([door, body.get("tools"), body.get("functions"), body.get("response_format")])
    except orjson.JSONEncodeError:  # too deep: checked off the loop
        return b""


def known_tools(key: bytes | None) -> bool:
    """Checked before: not again."""
    if not key or key not in _READ_TOOLS:
        return False
    _READ_TOOLS.move_to_end(key)
    return True


def read_tools(key: bytes | None) -> None:
    """Remember tools whose checks passed."""
    if not key or len(key) > TOOL_LIST_KEY_BYTES:
        return
    _READ_TOOLS[key] = None
    if len(_READ_TOOLS) > TOOL_LISTS_KEPT:
        _READ_TOOLS.popitem(last=False)


def heavy_round(plan: Plan) -> bool:
    """Whether building the round may take milliseconds."""
    return plan.book is not None and plan.book.schema_bytes > INLINE_ROUND_SCHEMA_BYTES


def heavy_answer(plan: Plan, answer: Answer) -> bool:
    """Whether judging may take milliseconds."""
    if plan.book is None:
        return False
    message = answer.message if isinstance(answer.message, dict) else {}
    size = len(message.get("content") or "") if isinstance(message.get("content"), str) else 0
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        size += len(arguments) if isinstance(arguments, str) else INLINE_ANSWER_CHARS
    if size > INLINE_ANSWER_CHARS or not isinstance(message.get("content"), str | None):
        return True
    long_schemas = plan.book.schema_bytes > INLINE_CHECKED_SCHEMA_BYTES or plan.book.branching
    if not long_schemas:
        return False
    # a long schema compiles on first use; a branching one stays slow
    names = [(c.get("function") or {}).get("name") for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    return not names or any(not plan.book.quick(n) for n in names)
