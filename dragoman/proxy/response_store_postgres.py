"""Stored responses in PostgreSQL (``server.responses: {kind: postgres, url: …}``), so
that several replicas — and every server process of each — share them: a response stored
through one is found, listed and continued through any other.

The same rows, bounds and owner isolation as the SQLite store (response_store.py): rows
older than ``max_age`` are invisible and pruned; past ``max_bytes`` the oldest rows of the
key holding the most go first (``_evictions``), decided inside the writing transaction under
one advisory lock so that concurrent writers do not each evict for the other. The schema is
versioned (``dragoman_schema``) and migrated at first use under a transaction-level advisory
lock, so replicas starting together migrate once. psycopg 3's async pool; the database
being unreachable is a 503 the client is told to retry, and the pool reconnects by itself
once it is back.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from dragoman.adapters.errors import Overloaded
from dragoman.proxy.response_store import Change, StoredResponse, _evictions, _over_bound, _PushedOut

log = structlog.get_logger("dragoman.responses")

# Each migration runs once, in order; a new one is appended, never edited.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE dragoman_responses (
        id TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL,
        size INTEGER NOT NULL,
        response BYTEA NOT NULL,
        input BYTEA NOT NULL,
        owner TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX dragoman_responses_by_owner_age ON dragoman_responses (owner, created_at);
    CREATE INDEX dragoman_responses_by_age ON dragoman_responses (created_at);
    """,
)
MIGRATION_LOCK = 0x647261676F6D616E  # "dragoman": one advisory lock id for migrations
WRITE_LOCK = MIGRATION_LOCK + 1  # and one for writes that may evict
CONNECT_SECONDS = 5.0


class StoreUnavailable(Overloaded):
    """The database did not answer: a 503 with Retry-After, in the caller's dialect."""


class PostgresStore:
    def __init__(self, url: str, *, max_age: float, max_bytes: int, max_connections: int = 10) -> None:
        try:
            from psycopg_pool import AsyncConnectionPool
        except ImportError as err:  # pragma: no cover - the extra is installed where it is configured
            raise RuntimeError("server.responses kind: postgres needs psycopg: pip install 'dragoman[postgres]'") from err
        self.max_age = max_age
        self.max_bytes = max_bytes
        self._pool = AsyncConnectionPool(url, min_size=1, max_size=max_connections, open=False, timeout=CONNECT_SECONDS,
                                         kwargs={"autocommit": True, "connect_timeout": int(CONNECT_SECONDS)})
        self._ready = False

    async def put(self, stored: StoredResponse) -> bool:
        if _over_bound(stored, self.max_bytes):
            return False  # before the write transaction: a refused row takes no lock

        async def given(db: Any) -> StoredResponse:
            return stored

        return bool(await self._kept(given))

    async def update(self, row_id: str, owner: str, change: Change) -> bool | None:
        async def changed(db: Any) -> StoredResponse | None:
            row = await self._select(db, row_id, owner, lock=True)
            return None if row is None else change(row)

        return await self._kept(changed)

    async def _kept(self, make: Callable[[Any], Awaitable[StoredResponse | None]]) -> bool | None:
        """Writes the row ``make`` gives, in the transaction ``make`` reads in, which
        holds the write lock first: every replica's writes are one after another, so a
        row read here is the latest. None when ``make`` gives none."""
        try:
            async with self._connection() as db, db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                stored = await make(db)
                if stored is None:
                    return None
                if _over_bound(stored, self.max_bytes):
                    return False
                size = len(stored.response) + len(stored.input)
                await db.execute(
                    "INSERT INTO dragoman_responses (id, created_at, size, response, input, owner) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET created_at = EXCLUDED.created_at, "
                    "size = EXCLUDED.size, response = EXCLUDED.response, input = EXCLUDED.input, owner = EXCLUDED.owner",
                    (stored.id, stored.created_at, size, stored.response, stored.input, stored.owner),
                )
                if stored.id in await self._prune(db):
                    raise _PushedOut(stored, size)
        except _PushedOut as out:
            out.log(self.max_bytes)
            return False
        return True

    async def get(self, response_id: str, owner: str = "") -> StoredResponse | None:
        async with self._connection() as db:
            return await self._select(db, response_id, owner)

    async def _select(self, db: Any, response_id: str, owner: str, *, lock: bool = False) -> StoredResponse | None:
        cursor = await db.execute(
            "SELECT id, created_at, response, input, owner FROM dragoman_responses "
            "WHERE id = %s AND owner = %s AND created_at >= %s" + (" FOR UPDATE" if lock else ""),
            (response_id, owner, time.time() - self.max_age),
        )
        row = await cursor.fetchone()
        return StoredResponse(row[0], row[1], bytes(row[2]), bytes(row[3]), row[4]) if row else None

    async def delete(self, response_id: str, owner: str = "") -> bool:
        async with self._connection() as db:
            cursor = await db.execute("DELETE FROM dragoman_responses WHERE id = %s AND owner = %s", (response_id, owner))
            return cursor.rowcount > 0

    async def aclose(self) -> None:
        await self._pool.close()

    async def _prune(self, db: Any) -> set[str]:
        await db.execute("DELETE FROM dragoman_responses WHERE created_at < %s", (time.time() - self.max_age,))
        cursor = await db.execute("SELECT owner, SUM(size) FROM dragoman_responses GROUP BY owner")
        held = {owner: int(total) for owner, total in await cursor.fetchall()}
        if sum(held.values()) <= self.max_bytes:
            return set()
        rows: dict[str, list[tuple[str, int]]] = {}
        for owner in held:
            cursor = await db.execute("SELECT id, size FROM dragoman_responses WHERE owner = %s ORDER BY created_at", (owner,))
            rows[owner] = [(row_id, size) for row_id, size in await cursor.fetchall()]
        doomed = _evictions(held, self.max_bytes, lambda owner: rows[owner])
        await db.execute("DELETE FROM dragoman_responses WHERE id = ANY(%s)", (list(doomed),))
        return doomed

    def _connection(self) -> Any:
        return _Connection(self)

    async def _migrate(self) -> None:
        async with self._pool.connection() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await db.execute("CREATE TABLE IF NOT EXISTS dragoman_schema (version INTEGER NOT NULL)")
            cursor = await db.execute("SELECT version FROM dragoman_schema")
            row = await cursor.fetchone()
            version = row[0] if row else 0
            if version > len(MIGRATIONS):
                raise RuntimeError(f"the database's dragoman schema is version {version}, newer than this dragoman "
                                   f"({len(MIGRATIONS)}): upgrade dragoman")
            for number, migration in enumerate(MIGRATIONS[version:], start=version + 1):
                await db.execute(migration)
                log.info("response store migrated", version=number)
            if row is None:
                await db.execute("INSERT INTO dragoman_schema (version) VALUES (%s)", (len(MIGRATIONS),))
            else:
                await db.execute("UPDATE dragoman_schema SET version = %s", (len(MIGRATIONS),))


class _Connection:
    """A pooled connection (the pool opened and the schema migrated on first use), with
    the database's failures turned into :class:`StoreUnavailable` and a write its own
    eviction pushes out turned into ``put`` returning False."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._context: Any = None

    async def __aenter__(self) -> Any:
        import psycopg

        store = self.store
        try:
            if not store._ready:
                await store._pool.open(wait=False)
                await store._migrate()
                store._ready = True
            self._context = store._pool.connection()
            return await self._context.__aenter__()
        except (psycopg.OperationalError, psycopg.errors.ConnectionTimeout, _pool_timeout()) as err:
            raise _unavailable(err) from err

    async def __aexit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        import psycopg

        try:
            await self._context.__aexit__(kind, error, traceback)
        except psycopg.OperationalError as err:
            raise _unavailable(err) from err
        if isinstance(error, psycopg.OperationalError):
            raise _unavailable(error) from error
        return False


def _pool_timeout() -> type[Exception]:
    from psycopg_pool import PoolTimeout

    return PoolTimeout


def _unavailable(err: Exception) -> StoreUnavailable:
    log.warning("response store unreachable", error=str(err).splitlines()[0] if str(err) else type(err).__name__)
    return StoreUnavailable("the response store (PostgreSQL) is not answering; retry shortly", retry_after=2)


__all__ = ["MIGRATIONS", "PostgresStore", "StoreUnavailable"]
