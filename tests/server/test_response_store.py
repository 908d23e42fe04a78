"""The response stores, SQLite and PostgreSQL (a real server, tests/support/postgres.py):
kept, found, deleted, expired, bounded in size, each key's rows its own."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dragoman.config.schema import ResponseStoreConfig
from dragoman.proxy.response_store import NoStore, SqliteStore, StoredResponse
from dragoman.proxy.response_stores import open_store
from dragoman.proxy.response_store_postgres import PostgresStore, StoreUnavailable
from tests.support.postgres import Postgres, postgres_server

Store = SqliteStore | PostgresStore


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """A store of the kind the parameter names, empty, with the bounds a test gives."""
    made: list[Store] = []

    def make(max_age: float, max_bytes: int) -> Store:
        if request.param == "sqlite":
            store: Store = SqliteStore(tmp_path / "s.sqlite3", max_age=max_age, max_bytes=max_bytes)
        else:
            url = request.getfixturevalue("postgres").database(f"t{len(made)}_{abs(hash(request.node.name)) % 10**8}")
            store = PostgresStore(url, max_age=max_age, max_bytes=max_bytes)
        made.append(store)
        return store

    yield make


def row(name: str, size: int = 10, age: float = 0.0) -> StoredResponse:
    return StoredResponse(name, time.time() - age, b"r" * size, b"[]")


async def test_put_get_delete(make_store: Callable[..., Store]) -> None:
    store = make_store(max_age=60, max_bytes=1 << 20)
    try:
        assert await store.put(row("a"))
        found = await store.get("a")
        assert found is not None and found.response == b"r" * 10 and found.input == b"[]"
        assert await store.get("b") is None and await store.get("a", "another key") is None
        assert not await store.delete("a", "another key")
        assert await store.delete("a") and not await store.delete("a")
        assert await store.get("a") is None
    finally:
        await store.aclose()


async def test_update_reads_changes_and_writes_one_row(make_store: Callable[..., Store]) -> None:
    store = make_store(max_age=60, max_bytes=100)
    try:
        assert await store.put(StoredResponse("a", time.time(), b"r", b"[1]", "alice"))

        def grow(found: StoredResponse) -> StoredResponse:
            return StoredResponse(found.id, time.time(), found.response, found.input[:-1] + b",2]", found.owner)

        assert await store.update("a", "alice", grow) is True
        assert (await store.get("a", "alice")).input == b"[1,2]"  # type: ignore[union-attr]
        assert await store.update("a", "bob", grow) is None  # another key's row is not there for it
        assert await store.update("missing", "alice", grow) is None

        def too_big(found: StoredResponse) -> StoredResponse:
            return StoredResponse(found.id, time.time(), b"x" * 200, found.input, found.owner)

        assert await store.update("a", "alice", too_big) is False
        assert (await store.get("a", "alice")).input == b"[1,2]"  # type: ignore[union-attr]

        def refuses(found: StoredResponse) -> StoredResponse:
            raise LookupError("no such item")

        with pytest.raises(LookupError):
            await store.update("a", "alice", refuses)
        assert (await store.get("a", "alice")).input == b"[1,2]"  # type: ignore[union-attr]
        assert await store.update("a", "alice", grow) is True  # the store is still usable after the rollback
    finally:
        await store.aclose()


async def test_updates_through_two_stores_on_one_database_all_land(make_store: Callable[..., Store]) -> None:
    """Two stores on one file or database, as two server processes or replicas hold them."""
    first = make_store(max_age=60, max_bytes=1 << 20)
    second = make_store(max_age=60, max_bytes=1 << 20) if isinstance(first, SqliteStore) else PostgresStore(
        first._pool.conninfo, max_age=60, max_bytes=1 << 20)  # fmt: skip
    try:
        assert await first.put(StoredResponse("c", time.time(), b"r", b""))

        def add(n: int) -> Callable[[StoredResponse], StoredResponse]:
            return lambda found: StoredResponse(found.id, time.time(), found.response, found.input + b"%d," % n, found.owner)

        results = await asyncio.gather(*((first, second)[n % 2].update("c", "", add(n)) for n in range(40)))
        assert results == [True] * 40
        written = (await second.get("c")).input.decode().rstrip(",").split(",")  # type: ignore[union-attr]
        assert sorted(map(int, written)) == list(range(40))
    finally:
        await first.aclose()
        await second.aclose()


async def test_sqlite_keeps_a_write_ahead_log(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite3", max_age=60, max_bytes=1 << 20)
    try:
        assert await store.put(row("a"))
    finally:
        await store.aclose()
    with sqlite3.connect(tmp_path / "s.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_expired_rows_are_invisible_and_pruned(make_store: Callable[..., Store]) -> None:
    store = make_store(max_age=60, max_bytes=1 << 20)
    try:
        await store.put(row("old", age=120))
        assert await store.get("old") is None
        await store.put(row("new"))  # a write prunes
        long_lived = make_store(max_age=3600, max_bytes=1 << 20)  # the same rows, read with a longer max_age
        if isinstance(store, PostgresStore):
            long_lived = PostgresStore(store._pool.conninfo, max_age=3600, max_bytes=1 << 20)
        try:
            assert await long_lived.get("old") is None and await long_lived.get("new") is not None
        finally:
            await long_lived.aclose()
    finally:
        await store.aclose()


async def test_the_oldest_go_when_over_the_size_bound(make_store: Callable[..., Store]) -> None:
    store = make_store(max_age=3600, max_bytes=100)
    try:
        for i in range(5):
            await store.put(row(f"r{i}", size=28, age=10 - i))  # 30 bytes each with the input
        kept = [name for name in (f"r{i}" for i in range(5)) if await store.get(name) is not None]
        assert kept == ["r2", "r3", "r4"]
        assert not await store.put(row("huge", size=200))  # alone over the bound: not kept
        assert await store.get("huge") is None and await store.get("r4") is not None
    finally:
        await store.aclose()


async def test_over_the_bound_the_key_holding_the_most_loses_its_oldest(make_store: Callable[..., Store]) -> None:
    store = make_store(max_age=3600, max_bytes=100)
    try:
        def owned(name: str, owner: str, age: float) -> StoredResponse:
            return StoredResponse(name, time.time() - age, b"r" * 18, b"[]", owner)  # 20 bytes

        assert await store.put(owned("a0", "A", 100))
        assert await store.put(owned("a1", "A", 99))
        for i in range(8):
            assert await store.put(owned(f"b{i}", "B", 50 - i))
        found = [r.id for r in [await store.get(n, o) for n, o in [("a0", "A"), ("a1", "A")] + [(f"b{i}", "B") for i in range(8)]] if r]
        assert found == ["a0", "a1", "b5", "b6", "b7"]  # A's older rows stay: B held more
        # A row that its own key's share pushes out at once is not kept, and costs nothing.
        assert not await store.put(StoredResponse("b-big", time.time(), b"r" * 80, b"[]", "B"))
        assert await store.get("b-big", "B") is None and await store.get("a0", "A") is not None
        assert await store.get("b5", "B") is not None
    finally:
        await store.aclose()


async def test_no_store() -> None:
    store = NoStore()
    assert not await store.put(row("a")) and await store.get("a") is None and not await store.delete("a")


def test_open_store_defaults_under_dragoman_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path))
    store = open_store(ResponseStoreConfig())
    assert isinstance(store, SqliteStore) and store.path == tmp_path / "responses.sqlite3"
    assert isinstance(open_store(ResponseStoreConfig(kind="none")), NoStore)


@pytest.mark.parametrize("fields", [{"max_age": 0}, {"max_bytes": 10}])
def test_config_bounds(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ResponseStoreConfig(**fields)  # type: ignore[arg-type]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
async def test_the_store_file_is_the_owner_s_alone(tmp_path: Path) -> None:
    """It holds every stored conversation: mode 0600, and so its -wal and -shm files."""
    store = SqliteStore(tmp_path / "responses.sqlite3", max_age=60, max_bytes=10_000)
    try:
        assert await store.put(row("a"))
        files = sorted(tmp_path.iterdir())
        assert [f.name for f in files] == ["responses.sqlite3", "responses.sqlite3-shm", "responses.sqlite3-wal"]
        assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    finally:
        await store.aclose()


async def test_postgres_down_is_a_503_and_it_recovers_without_a_restart(postgres: Postgres) -> None:
    store = PostgresStore(postgres.database("restart"), max_age=60, max_bytes=1 << 20)
    try:
        assert await store.put(row("kept"))
        postgres.stop()
        with pytest.raises(StoreUnavailable) as refused:
            await store.get("kept")
        assert refused.value.status == 503 and "retry" in refused.value.message
        postgres.start()
        deadline = time.monotonic() + 20
        while True:
            try:
                found = await store.get("kept")
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store did not reconnect"
                await asyncio.sleep(0.2)
        assert found is not None and found.response == b"r" * 10
    finally:
        if postgres.process is None:
            postgres.start()
        await store.aclose()


async def test_replicas_starting_together_migrate_once(postgres: Postgres) -> None:
    url = postgres.database("migrate")
    stores = [PostgresStore(url, max_age=60, max_bytes=1 << 20) for _ in range(4)]
    try:
        assert all(await asyncio.gather(*(store.put(row(f"r{i}")) for i, store in enumerate(stores))))
        assert all([await stores[0].get(f"r{i}") is not None for i in range(4)])  # each store sees the others' rows
    finally:
        for store in stores:
            await store.aclose()
    import psycopg

    with psycopg.connect(url) as db:
        assert db.execute("SELECT version FROM dragoman_schema").fetchall() == [(1,)]
