"""Stored responses of ``/v1/responses``: an embedded SQLite database (WAL), bounded.

A row holds a response object as returned to the client and the input items the model
saw for it (the earlier response's items included, so a conversation is rebuilt from
one row and deleting an ancestor breaks nothing). Rows older than ``max_age`` are
invisible and pruned; when the rows together pass ``max_bytes`` the oldest rows of the
key holding the most bytes go first, so one key filling the store pushes out its own
responses, never those of a key that holds less (see ``_evictions``).

Each row belongs to the API key that made it (``owner``: a digest of the key, empty when
the server has no keys), as OpenAI keeps a project's responses to that project: another
key can neither read, chain from nor delete it, and is told only that it is not found.

SQLite calls block, so they run on one thread of their own that owns the connection;
the event loop only awaits them. One file per server: with several replicas, see
docs/dialects.md ("Several replicas").
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec
import structlog


log = structlog.get_logger("dragoman.responses")

FILE_NAME = "responses.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    size INTEGER NOT NULL,
    response BLOB NOT NULL,
    input BLOB NOT NULL,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created_at);
"""


class StoredResponse(msgspec.Struct, frozen=True):
    id: str
    created_at: float
    response: bytes  # the response object's JSON
    input: bytes  # JSON list of the input items, as input_items lists them
    owner: str = ""  # proxy.auth.key_owner of the key that stored it


# A row's new content from its current one, run inside the store's write transaction.
Change = Callable[[StoredResponse], StoredResponse]


@runtime_checkable
class ResponseStore(Protocol):
    """What the routes need: SQLite (this module) for one machine, PostgreSQL
    (response_store_postgres.py) shared by replicas."""

    async def put(self, stored: StoredResponse) -> bool: ...

    async def update(self, row_id: str, owner: str, change: Change) -> bool | None:
        """Read one row, ``change`` it and write it back as one transaction of the
        store, so that changes made at once through any process all land. None when no
        such row is there for ``owner``; False when the changed row was not kept (as
        ``put``); an exception ``change`` raises leaves the row as it was."""
        ...

    async def get(self, response_id: str, owner: str = "") -> StoredResponse | None: ...

    async def delete(self, response_id: str, owner: str = "") -> bool: ...

    async def aclose(self) -> None: ...


class NoStore:
    """``kind: none``: nothing is kept, so nothing is ever found."""

    async def put(self, stored: StoredResponse) -> bool:
        return False

    async def update(self, row_id: str, owner: str, change: Change) -> bool | None:
        return None

    async def get(self, response_id: str, owner: str = "") -> StoredResponse | None:
        return None

    async def delete(self, response_id: str, owner: str = "") -> bool:
        return False

    async def aclose(self) -> None:
        return None


class SqliteStore:
    def __init__(self, path: Path, *, max_age: float, max_bytes: int) -> None:
        self.path = path
        self.max_age = max_age
        self.max_bytes = max_bytes
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="responses-store")
        self._db: sqlite3.Connection | None = None

    async def put(self, stored: StoredResponse) -> bool:
        """Keep ``stored``; False (and a log line) when it was not kept: over ``max_bytes``
        alone, or pushed out at once by its own key's share of the bound."""
        if _over_bound(stored, self.max_bytes):
            return False  # before the write transaction: a refused row takes no lock
        return await self._run(self._kept, lambda db: stored)

    async def update(self, row_id: str, owner: str, change: Change) -> bool | None:
        def changed(db: sqlite3.Connection) -> StoredResponse | None:
            row = self._select(db, row_id, owner)
            return None if row is None else change(row)

        return await self._run(self._kept, changed)

    async def get(self, response_id: str, owner: str = "") -> StoredResponse | None:
        return await self._run(self._get, response_id, owner)

    async def delete(self, response_id: str, owner: str = "") -> bool:
        return await self._run(self._delete, response_id, owner)

    async def aclose(self) -> None:
        if self._db is not None:
            await self._run(self._close)
        self._thread.shutdown(wait=True)

    async def _run(self, call: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    # -- on the store's thread ----------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Conversations are private: the owner alone reads the file (SQLite gives the
            # -wal and -shm files the database's own mode). Windows ignores the mode.
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
            if "owner" not in columns:  # a file from before rows had owners: theirs is ''
                db.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
            self._db = db
        return self._db

    def _kept(self, make: Callable[[sqlite3.Connection], StoredResponse | None]) -> bool | None:
        """Writes the row ``make`` gives, in the write transaction ``make`` reads in
        (``BEGIN IMMEDIATE``: one writer at a time across processes on the file); None
        when it gives none."""
        db = self._connection()
        try:
            with _transaction(db):
                stored = make(db)
                if stored is None:
                    return None
                if _over_bound(stored, self.max_bytes):
                    return False
                size = len(stored.response) + len(stored.input)
                db.execute(
                    "INSERT OR REPLACE INTO responses (id, created_at, size, response, input, owner) VALUES (?, ?, ?, ?, ?, ?)",
                    (stored.id, stored.created_at, size, stored.response, stored.input, stored.owner),
                )
                if stored.id in self._prune(db):
                    raise _PushedOut(stored, size)
        except _PushedOut as out:
            out.log(self.max_bytes)
            return False
        return True

    def _prune(self, db: sqlite3.Connection) -> set[str]:
        """Drops what is expired or over ``max_bytes``; the ids of the rows dropped."""
        db.execute("DELETE FROM responses WHERE created_at < ?", (time.time() - self.max_age,))
        held = dict(db.execute("SELECT owner, SUM(size) FROM responses GROUP BY owner").fetchall())
        doomed = _evictions(held, self.max_bytes, lambda owner: db.execute(
            "SELECT id, size FROM responses WHERE owner = ? ORDER BY created_at", (owner,)))  # fmt: skip
        db.executemany("DELETE FROM responses WHERE id = ?", [(row_id,) for row_id in doomed])
        return doomed

    def _get(self, response_id: str, owner: str) -> StoredResponse | None:
        return self._select(self._connection(), response_id, owner)

    def _select(self, db: sqlite3.Connection, response_id: str, owner: str) -> StoredResponse | None:
        row = db.execute(
            "SELECT id, created_at, response, input, owner FROM responses WHERE id = ? AND owner = ? AND created_at >= ?",
            (response_id, owner, time.time() - self.max_age),
        ).fetchone()
        return StoredResponse(row[0], row[1], bytes(row[2]), bytes(row[3]), row[4]) if row else None

    def _delete(self, response_id: str, owner: str) -> bool:
        db = self._connection()
        return db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner)).rowcount > 0

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _evictions(held: dict[str, int], max_bytes: int, oldest_first: Callable[[str], Iterable[tuple[str, int]]]) -> set[str]:
    """The rows to drop to bring ``held`` (bytes by owner) under ``max_bytes``: one at
    a time, the oldest row of whichever owner holds the most. Each of n keys keeps at
    least max_bytes / n whatever the others write (a key flooding the store is the one
    holding the most, so its own oldest go), and a lone key still has the whole bound;
    a fixed per-key quota would give up one or the other. ``oldest_first(owner)``
    iterates an owner's (id, size) rows, oldest first."""
    excess = sum(held.values()) - max_bytes
    rows: dict[str, Iterator[tuple[str, int]]] = {}
    doomed: set[str] = set()
    while excess > 0:
        owner = max(held, key=lambda o: held[o])
        row_id, size = next(rows.setdefault(owner, iter(oldest_first(owner))))
        doomed.add(row_id)
        held[owner] -= size
        excess -= size
    return doomed


def _over_bound(stored: StoredResponse, max_bytes: int) -> bool:
    """Whether ``stored`` alone is over ``max_bytes`` (said in the log): never written."""
    size = len(stored.response) + len(stored.input)
    if size > max_bytes:
        log.warning("response too large to store", response_id=stored.id, bytes=size, max_bytes=max_bytes)
    return size > max_bytes


class _PushedOut(Exception):
    """The row just written is among those its own write evicts: its transaction is
    rolled back, so the older rows it would have cost stay."""

    def __init__(self, stored: StoredResponse, size: int) -> None:
        super().__init__(stored.id)
        self.row_id, self.size = stored.id, size

    def log(self, max_bytes: int) -> None:
        log.warning("response not stored: its key already holds more of max_bytes than the others",
                    response_id=self.row_id, bytes=self.size, max_bytes=max_bytes)  # fmt: skip


class _transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


__all__ = ["FILE_NAME", "NoStore", "ResponseStore", "SqliteStore", "StoredResponse"]
