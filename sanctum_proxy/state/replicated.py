"""State that replicas share: small named JSON tables and two limits held in Redis.

Without `redis_url` a table is a dict. With it, each table is a Redis hash mirrored in every process, so reads never
wait and an outage degrades to local memory. Limits answer None when Redis is slow; the caller then limits locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from typing import Any, Protocol

import orjson

from sanctum_proxy.core.shapes import JSONObject

log = logging.getLogger("sanctum_proxy.shared")
CHANNEL = "sanctum:changes"
PREFIX = "sanctum:"
LIMIT_SECONDS = 0.5  # then the process' own count decides
SLOT_LEASE_SECONDS = 3600.0  # a dead replica's slots stop counting after this
# KEYS[1] a key's slots; ARGV: limit, lease seconds, slot id. 1: taken, 0: at the limit.
TAKE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
return 1
"""
# KEYS[1] the bucket; ARGV: tokens per second, burst. 1: taken, 0: none left.
TAKE_TOKEN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = math.min(burst, (tonumber(held[1]) or burst) + (now - (tonumber(held[2]) or now)) * rate)
local taken = 0
if tokens >= 1 then tokens, taken = tokens - 1, 1 end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
return taken
"""


class Table(Protocol):
    def get(self, key: str) -> JSONObject | None: ...
    def set(self, key: str, value: JSONObject) -> None: ...
    def delete(self, key: str) -> None: ...
    def items(self) -> list[tuple[str, JSONObject]]: ...


def pair_key(upstream: str, model: str) -> str:
    """One row key for an (upstream, model) pair, the same on every replica."""
    return orjson.dumps([upstream, model]).decode()


def pair_of(key: str) -> tuple[str, str]:
    upstream, model = orjson.loads(key)
    return str(upstream), str(model)


MAX_ROWS = 1024


def clear_pairs(table: Table, upstream: str | None = None, model: str | None = None) -> int:
    """Forget the rows of (upstream, model) pairs (None: any); how many."""
    gone = [key for key, _ in table.items()
            if (upstream is None or pair_of(key)[0] == upstream) and (model is None or pair_of(key)[1] == model)]
    for key in gone:
        table.delete(key)
    return len(gone)


class LocalTable:
    """A table in this process of at most `max_rows` rows, least recently used evicted first."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self._rows: dict[str, JSONObject] = {}
        self.max_rows = max_rows

    def get(self, key: str) -> JSONObject | None:
        row = self._rows.pop(key, None)
        if row is not None:
            self._rows[key] = row
        return row

    def set(self, key: str, value: JSONObject) -> None:
        self._rows.pop(key, None)
        self._rows[key] = value
        while len(self._rows) > self.max_rows:
            self.evicted(next(iter(self._rows)))

    def evicted(self, key: str) -> None:
        self._rows.pop(key, None)

    def delete(self, key: str) -> None:
        self._rows.pop(key, None)

    def items(self) -> list[tuple[str, JSONObject]]:
        return list(self._rows.items())

    def replace_all(self, rows: dict[str, JSONObject]) -> None:
        self._rows = dict(list(rows.items())[-self.max_rows:])


class SharedTable(LocalTable):
    """A local copy whose writes go through to Redis."""

    def __init__(self, name: str, state: SharedState, max_rows: int = MAX_ROWS) -> None:
        super().__init__(max_rows)
        self.name = name
        self._state = state

    def evicted(self, key: str) -> None:
        super().evicted(key)
        self._state.write(self.name, key, None)

    def set(self, key: str, value: JSONObject) -> None:
        super().set(key, value)
        self._state.write(self.name, key, value)

    def delete(self, key: str) -> None:
        super().delete(key)
        self._state.write(self.name, key, None)

    def apply(self, key: str, value: JSONObject | None) -> None:
        """A change published by any replica, this one too: local copy only."""
        if value is None:
            super().delete(key)
        else:
            super().set(key, value)


class SharedState:
    """The tables of one process: local, or Redis-backed with `redis_url`."""

    def __init__(self, redis_url: str | None = None, *, refresh_seconds: float = 30.0,
                 timeout: float = 3.0, max_rows: int = MAX_ROWS) -> None:
        self.redis_url = redis_url
        self.max_rows = max_rows
        self._refresh = refresh_seconds
        self._timeout = timeout
        self._tables: dict[str, LocalTable] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._listener: asyncio.Task[None] | None = None
        self._redis: Any = None
        self.connected = False
        self._synced = asyncio.Event()
        self.limits_local = False  # logged once per outage

    def table(self, name: str) -> Table:
        if name not in self._tables:
            self._tables[name] = SharedTable(name, self, self.max_rows) if self.redis_url \
                else LocalTable(self.max_rows)
        return self._tables[name]

    async def start(self) -> None:
        """Connect and load every table within `timeout`; on failure, go on locally and retry."""
        if not self.redis_url:
            return
        import redis.asyncio as aioredis  # the optional [redis] extra

        self._redis = aioredis.from_url(self.redis_url, socket_timeout=self._timeout,
                                        socket_connect_timeout=self._timeout, health_check_interval=15)
        self._listener = asyncio.create_task(self._listen())
        try:
            await asyncio.wait_for(self._synced.wait(), self._timeout)
        except TimeoutError:
            log.warning("shared state: Redis at %s not reachable yet; deciding locally until it is",
                        without_password(self.redis_url))

    async def aclose(self) -> None:
        if self._writes:
            await asyncio.wait(self._writes, timeout=self._timeout)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        if self._redis is not None:
            await self._redis.aclose()

    def write(self, table: str, key: str, value: JSONObject | None) -> None:
        """Send one change to Redis in the background."""
        if self._redis is None:
            return
        task = asyncio.create_task(self._write(table, key, value))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, table: str, key: str, value: JSONObject | None) -> None:
        message = orjson.dumps({"table": table, "key": key, "value": value})
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                if value is None:
                    pipe.hdel(PREFIX + table, key)
                else:
                    pipe.hset(PREFIX + table, key, orjson.dumps(value))
                pipe.publish(CHANNEL, message)
                await pipe.execute()
        except Exception as exc:  # the change stays local
            log.warning("shared state: could not write %s to Redis: %s", table, exc)

    async def _listen(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    await self._reload()
                    self.connected, backoff = True, 0.5
                    self._synced.set()
                    await self._follow(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # retry with backoff
                if self.connected:
                    log.warning("shared state: lost Redis (%s); deciding locally until it is back", exc)
                self.connected = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _follow(self, pubsub: Any) -> None:
        loop = asyncio.get_running_loop()
        reload_at = loop.time() + self._refresh
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message.get("type") == "message":
                self._apply(message["data"])
            if loop.time() >= reload_at:
                await self._reload()
                reload_at = loop.time() + self._refresh

    def _apply(self, data: bytes) -> None:
        try:
            change = orjson.loads(data)
            table = self._tables.get(change["table"])
            if isinstance(table, SharedTable):
                table.apply(str(change["key"]), change["value"])
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            log.warning("shared state: ignored a malformed change message: %s", exc)

    async def _reload(self) -> None:
        for name, table in list(self._tables.items()):
            raw = await self._redis.hgetall(PREFIX + name)
            table.replace_all({k.decode(): orjson.loads(v) for k, v in raw.items()})

    async def take_slot(self, owner: bytes, limit: int) -> str | bool | None:
        """One of `owner`'s `limit` slots across replicas: its id, False when all are held, None without Redis."""
        slot = uuid.uuid4().hex
        taken = await self._limit(TAKE_SLOT, _slots_key(owner), limit, SLOT_LEASE_SECONDS, slot)
        return None if taken is None else (slot if taken else False)

    def give_slot(self, owner: bytes, slot: str) -> None:
        """Give a slot back in the background; one not given back ends with its lease."""
        if self._redis is not None:
            self._spawn(self._give(owner, slot))

    async def _give(self, owner: bytes, slot: str) -> None:
        try:
            await self._redis.zrem(_slots_key(owner), slot)
        except Exception as exc:  # the lease ends it
            log.warning("shared limits: could not give a slot back to Redis: %s", exc)

    async def take_token(self, bucket: str, per_minute: int) -> bool | None:
        """A token of the shared bucket (per_minute a minute, as many at once); None without Redis."""
        taken = await self._limit(TAKE_TOKEN, PREFIX + "rate:" + bucket, per_minute / 60.0, per_minute)
        return None if taken is None else bool(taken)

    async def _limit(self, script: str, key: str, *args: object) -> int | None:
        """Run a limit's script; None, logged once per outage, when Redis cannot answer now."""
        if self._redis is None:
            return None
        try:
            if not self.connected:
                raise ConnectionError("Redis is not connected")
            async with asyncio.timeout(LIMIT_SECONDS):
                answer = int(await self._redis.eval(script, 1, key, *args))
        except Exception as exc:  # the process' own limit holds
            if not self.limits_local:
                log.warning("shared limits: Redis did not answer (%s); each process holds its own limits "
                            "until it does", exc or type(exc).__name__)
            self.limits_local = True
            return None
        if self.limits_local:
            log.warning("shared limits: Redis answers again; limits are held across replicas")
            self.limits_local = False
        return answer

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def snapshot(self) -> JSONObject:
        if not self.redis_url:
            return {"backend": "memory"}
        return {"backend": "redis", "url": without_password(self.redis_url), "connected": self.connected}


def _slots_key(owner: bytes) -> str:
    """A hash of the client key, never the key itself."""
    return PREFIX + "slots:" + hashlib.sha256(owner).hexdigest()[:32]


def without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"
