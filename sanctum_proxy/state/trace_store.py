"""The SQLite store of trace documents.

One connection, shared by the writer thread and the read routes and serialised by a lock, because `:memory:` lives in
one connection. On disk it stays near its byte budget: the writer prunes after each share of it written.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.state.traces import TraceDoc, clipped, expanded, summary

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    model TEXT NOT NULL,
    outcome TEXT NOT NULL,
    summary BLOB NOT NULL,
    doc BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_created ON traces (created);
"""
# The newest trace whose running byte total passes the budget, and all older. length() of a BLOB reads only its header.
_OVER_BUDGET = """
DELETE FROM traces WHERE seq <= (
    SELECT MAX(seq) FROM (SELECT seq, SUM(length(doc)) OVER (ORDER BY seq DESC) AS total FROM traces)
    WHERE total > ?
)
"""
PAGE_SIZE = 65536  # documents are tens of KB: SQLite's largest page writes one in few
_HELD = "SELECT COALESCE(SUM(length(doc)), 0), MAX(seq) FROM traces"
INSERT = "INSERT OR REPLACE INTO traces (id, created, model, outcome, summary, doc) VALUES (?, ?, ?, ?, ?, ?)"


_ID_KEY = os.urandom(32)
_ids = itertools.count()


def new_id() -> str:
    """A UUIDv7 as 32 hex digits, so ids grow with time and append to the index.

    Its random bits are a keyed hash of a counter: os.urandom lets go of the GIL, and the trace writer may hold it."""
    ms = time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF
    rand = int.from_bytes(hashlib.blake2b(next(_ids).to_bytes(8, "big"), key=_ID_KEY, digest_size=10).digest(), "big")
    value = ms << 80 | 0x7 << 76 | (rand >> 68) << 64 | 0b10 << 62 | rand & (1 << 62) - 1
    return f"{value:032x}"


def default_path(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/sanctum-proxy/traces.sqlite3`: state that outlives a restart but needs no backup."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sanctum-proxy" / "traces.sqlite3"


@dataclass(frozen=True)
class Query:
    outcome: str | None = None
    model: str | None = None
    since: float | None = None  # unix seconds
    limit: int = 50
    after: str | None = None  # a trace id: the page starts after it


class UnknownCursor(KeyError):
    """`after` names a trace the store does not hold."""


class TraceStore:
    def __init__(self, path: str, journal_limit: int | None = None) -> None:
        self.path = path
        self.unpruned = 0  # document bytes written since the last prune
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if path != ":memory:":
                self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file only: fewer pages a document
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                # Debian's SQLite zeroes every page a prune frees (secure_delete on), so a full store wrote each
                # pruned trace a second time; FAST zeroes only what a commit writes anyway
                self._db.execute("PRAGMA secure_delete=FAST")
                if journal_limit is not None:  # the log cut back after each checkpoint
                    self._db.execute(f"PRAGMA journal_size_limit={int(journal_limit)}")
                    self._db.execute(f"PRAGMA wal_autocheckpoint={min(1000, max(2, journal_limit // PAGE_SIZE))}")
            self._db.executescript(SCHEMA)
            # Bytes held up to `seq` `self._seen`, a lower bound; newer rows are summed at the next prune.
            self._bytes, self._seen = self._held()

    def add(self, docs: list[TraceDoc], max_doc_bytes: int | None = None, until: int | None = None) -> int:
        """Store documents (clipped to `max_doc_bytes`) until `unpruned` reaches `until`; how many."""
        rows = []
        written = self.unpruned
        for d in docs:
            data = orjson.dumps(d)
            if max_doc_bytes is not None and len(data) > max_doc_bytes:
                d = clipped(d, max_doc_bytes, len(data))
                data = orjson.dumps(d)
            rows.append((d["id"], d["created"], d["model"], d["outcome"], orjson.dumps(summary(d)), data))
            written += len(data)
            if until is not None and written >= until:
                break
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(INSERT, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self.unpruned = written
        return len(rows)

    def prune(self, max_count: int, oldest: float, max_bytes: int | None = None) -> int:
        """Keep the newest `max_count` traces, none older than `oldest`, within `max_bytes`; returns how many went.

        Each step reads only the rows it adds or removes; the full byte window runs only past the tracked bound.
        """
        with self._lock:
            self._db.execute("BEGIN")
            try:
                added, last = self._db.execute(_HELD + " WHERE seq > ?", (self._seen,)).fetchone()
                held, seen = self._bytes + added, self._seen if last is None else last
                held -= self._db.execute(_HELD + " WHERE created < ?", (oldest,)).fetchone()[0]
                gone = self._db.execute("DELETE FROM traces WHERE created < ?", (oldest,)).rowcount
                bound = self._db.execute("SELECT MAX(seq) FROM traces").fetchone()[0]
                if bound is not None:
                    held -= self._db.execute(_HELD + " WHERE seq <= ?", (bound - max_count,)).fetchone()[0]
                    gone += self._db.execute("DELETE FROM traces WHERE seq <= ?", (bound - max_count,)).rowcount
                if max_bytes is not None and held > max_bytes:
                    gone += self._db.execute(_OVER_BUDGET, (max_bytes,)).rowcount
                    held, exact_seen = self._held()
                    seen = max(seen, exact_seen)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._bytes, self._seen, self.unpruned = held, seen, 0
        return gone

    def _held(self) -> tuple[int, int]:
        """The document bytes held and the last `seq` (0: none), in one snapshot."""
        held, last = self._db.execute(_HELD).fetchone()
        return held, last or 0

    def list(self, query: Query) -> tuple[list[JSONObject], bool]:
        """Summaries, newest first, and whether more follow."""
        where, args = [], []
        with self._lock:
            if query.after is not None:
                row = self._db.execute("SELECT seq FROM traces WHERE id = ?", (query.after,)).fetchone()
                if row is None:
                    raise UnknownCursor(query.after)
                where.append("seq < ?")
                args.append(row[0])
            for column, value in (("outcome", query.outcome), ("model", query.model)):
                if value is not None:
                    where.append(f"{column} = ?")
                    args.append(value)
            if query.since is not None:
                where.append("created >= ?")
                args.append(query.since)
            sql = "SELECT summary FROM traces" + (" WHERE " + " AND ".join(where) if where else "")
            rows = self._db.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, query.limit + 1)).fetchall()
        return [orjson.loads(r[0]) for r in rows[:query.limit]], len(rows) > query.limit

    def get(self, trace_id: str) -> JSONObject | None:
        with self._lock:
            row = self._db.execute("SELECT doc FROM traces WHERE id = ?", (trace_id,)).fetchone()
        return None if row is None else expanded(dict(orjson.loads(row[0])))

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM traces").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
