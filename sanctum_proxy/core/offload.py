"""CPU-heavy work on a small thread pool, so other requests keep being served; each keeps its own budget."""

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
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


async def off_loop_if(heavy: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """On the CPU pool when `heavy` (repair/offloading.py decides), else inline."""
    return await offloaded(fn, *args, **kwargs) if heavy else fn(*args, **kwargs)
