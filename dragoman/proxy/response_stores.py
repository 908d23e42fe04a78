"""Which response store the config names: SQLite (the embedded default), PostgreSQL
(shared by replicas), or none."""

from __future__ import annotations

from pathlib import Path

from dragoman.config.paths import dragoman_home
from dragoman.config.schema import ResponseStoreConfig
from dragoman.proxy.response_store import FILE_NAME, NoStore, ResponseStore, SqliteStore


def open_store(config: ResponseStoreConfig) -> ResponseStore:
    """The configured store; the SQLite file is created, the PostgreSQL schema migrated,
    on first use."""
    if config.kind == "none":
        return NoStore()
    if config.kind == "postgres":
        from dragoman.proxy.response_store_postgres import PostgresStore  # psycopg only where configured

        assert config.url is not None  # the config's own check
        return PostgresStore(config.url, max_age=config.max_age, max_bytes=config.max_bytes)
    path = Path(config.path).expanduser() if config.path else dragoman_home() / FILE_NAME
    return SqliteStore(path, max_age=config.max_age, max_bytes=config.max_bytes)


__all__ = ["open_store"]
