"""The operating system's whole-file lock (``fcntl.flock``; ``msvcrt.locking`` on
Windows), taken without blocking and polled, so that a process that dies, however it
dies, lets go, and async code waits without holding up its event loop. Two opens of one
file conflict even within one process, so the lock orders coroutines as well as
processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

POLL_SECONDS = 0.5


def try_lock(fd: int) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


def open_lock_file(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


@contextlib.asynccontextmanager
async def held(path: Path) -> AsyncIterator[None]:
    """``path``'s lock for the block, awaited in polls."""
    fd = open_lock_file(path)
    try:
        while not try_lock(fd):
            await asyncio.sleep(POLL_SECONDS)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)
