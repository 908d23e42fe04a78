"""One build at a time per ``DRAGOMAN_HOME``, across processes: each server worker
(``server.workers: N``), each ``dragoman models prepare`` and each build a server
started take ``<home>/build.lock`` before the heavy half begins, so N builds never pass
their memory checks together and then need N times the memory.

The lock is the operating system's (:mod:`file_lock`): a process that dies, however it
dies, lets go of it. A waiting build polls, and says once which build it waits for (``build.lock.who`` holds the holder's description).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dragoman.backends.onnx.prepare.file_lock import POLL_SECONDS, open_lock_file, try_lock, unlock


@contextlib.contextmanager
def build_lock(home: Path, what: str, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold the home's build lock for the block; ``on_wait`` gets one line when another
    build holds it (then this one waits for it to end)."""
    who = home / "build.lock.who"
    fd = open_lock_file(home / "build.lock")
    try:
        told = False
        while not try_lock(fd):
            if not told:
                try:
                    holder = who.read_text(encoding="utf-8", errors="replace")[:300].strip() or "another build"
                except OSError:
                    holder = "another build"
                on_wait(f"waiting: another process is building {holder}; one build runs at a time, "
                        "this one starts when it ends")
                told = True
            time.sleep(POLL_SECONDS)
        with contextlib.suppress(OSError):
            who.write_text(f"{what} (pid {os.getpid()})", encoding="utf-8")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                who.unlink()
            unlock(fd)
    finally:
        os.close(fd)
