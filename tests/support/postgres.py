"""A real PostgreSQL server for the tests that use one: ``initdb`` into a temporary
folder, ``postgres`` on 127.0.0.1 on a free port (as the ``postgres`` user when the tests
run as root, which PostgreSQL refuses to run as). Debian's ``postgresql`` package puts the
binaries in /usr/lib/postgresql/VERSION/bin; ``.ci/run`` installs it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.support.server import free_port


def binaries() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


class Postgres:
    def __init__(self, bin_dir: Path, folder: Path) -> None:
        self.bin = bin_dir
        self.data = folder / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen[bytes] | None = None
        self._as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as_user:
            shutil.chown(folder, "postgres")
        subprocess.run([*self._as_user, str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                        "--no-sync"], check=True, capture_output=True)  # fmt: skip

    def start(self) -> None:
        self.process = subprocess.Popen(
            [*self._as_user, str(self.bin / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
             "-k", str(self.data), "-c", "fsync=off", "-c", "full_page_writes=off"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                psycopg.connect(self.url, connect_timeout=1).close()
                return
            except psycopg.OperationalError:
                assert self.process.poll() is None, "postgres exited at start"
                time.sleep(0.1)
        raise AssertionError("postgres did not start within 30 s")

    def stop(self) -> None:
        if self.process is not None:
            # Fast shutdown (a smart one would wait for the pool's connections), by pg_ctl:
            # under runuser, a signal to our child would not reach postgres itself.
            subprocess.run([*self._as_user, str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", "-w"],
                           check=True, capture_output=True)  # fmt: skip
            self.process.wait(30)
            self.process = None

    def database(self, name: str) -> str:
        """A new, empty database; its URL."""
        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}"')
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    bin_dir = binaries()
    if bin_dir is None:
        import pytest

        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run does)")
    with tempfile.TemporaryDirectory(prefix="dragoman-pg-") as folder:
        server = Postgres(bin_dir, Path(folder))
        server.start()
        try:
            yield server
        finally:
            server.stop()
