"""CPU-heavy work off the event loop: `await offloaded(fn, *args)` runs `fn` on a small pool of threads.

What a request or an answer can make big (reading a large request's tools, judging a large answer or one
whose schema branches) runs there, so /healthz and every other request keep being served while it runs
(docs/contract.md, Budgets). Each piece of work keeps its own budget: the pool bounds how many run at once
(OFFLOAD_WORKERS), not how long one runs. The caller hands over what the request already holds (bounded by
max_body_bytes / max_answer_bytes); nothing is copied. A cancelled caller does not stop the thread: the
work's budget does.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

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
    """`fn(*args, **kwargs)` on the CPU pool; its result or its exception."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


async def off_loop_if(heavy: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`: on the CPU pool when `heavy` (repair/offloading.py decides), else inline."""
    return await offloaded(fn, *args, **kwargs) if heavy else fn(*args, **kwargs)
