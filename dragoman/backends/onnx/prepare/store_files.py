"""Reading files out of a local model store that may have been written by anyone (an
Ollama store is just a folder; ``/api/pull`` reads it for whoever asks).

What Ollama writes is plain: regular files named by their content's sha256, of the
size the manifest records, inside the store. Anything else is refused before a byte is
read: a symlink (Ollama makes none; one could point anywhere), a FIFO or device (an
``open`` would block, or read forever), a path that resolves outside the store (a
symlinked folder, or on Windows a name that is a drive), a size other than the
declared one, and text larger than its cap. Reads are bounded by that cap, whatever
the file does between the check and the read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePath, PureWindowsPath

from dragoman.backends.onnx.prepare.support import PrepareError, human_bytes

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def inside(root: PurePath, path: PurePath) -> bool:
    """Whether ``path`` lies under ``root``, compared part by part (same drive and
    anchor, no ``..``) — pure, so Windows paths are checkable anywhere."""
    if path.anchor.lower() != root.anchor.lower() or ".." in path.parts:
        return False
    fold = isinstance(path, PureWindowsPath)  # Windows names are case-insensitive
    root_parts = [p.lower() if fold else p for p in root.parts]
    parts = [p.lower() if fold else p for p in path.parts]
    return len(parts) > len(root_parts) and parts[: len(root_parts)] == root_parts


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def checked_stat(store: Path, path: Path, what: str) -> os.stat_result:
    """``path``'s own status (never a symlink's target), once it is a regular file
    that resolves inside ``store``; else a :class:`PrepareError` naming ``what``."""
    if not inside(store, path):
        raise PrepareError(f"{what} is outside the Ollama store; not reading it")
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise PrepareError(f"{what} is missing from the Ollama store; pull the model again with Ollama") from None
    except OSError as exc:
        raise PrepareError(f"cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(status.st_mode):
        raise PrepareError(f"{what} is {_kind(status.st_mode)}, not a regular file as Ollama writes; not reading it "
                           "(pull the model again with Ollama)")  # fmt: skip
    try:
        real = path.resolve(strict=True)
        root = store.resolve(strict=True)
    except OSError as exc:
        raise PrepareError(f"cannot read {what}: {exc.strerror or exc}") from None
    if not inside(root, real):
        raise PrepareError(f"{what} resolves outside the Ollama store (through a symlinked folder); not reading it "
                           "(set OLLAMA_MODELS to the folder the store really is in)")  # fmt: skip
    return status


def read_bounded(store: Path, path: Path, *, what: str, cap: int, size: int | None = None, sha256: str | None = None) -> bytes:
    """The bytes of ``path`` (checked as :func:`checked_stat` checks), at most ``cap``;
    ``size`` and ``sha256``, when given, must be what the file has."""
    status = checked_stat(store, path, what)
    if size is not None and status.st_size != size:
        raise PrepareError(f"{what} has {status.st_size} bytes and the manifest says {size}; "
                           "the store is damaged — pull the model again with Ollama")  # fmt: skip
    if status.st_size > cap:
        raise PrepareError(f"{what} is {human_bytes(status.st_size)}, over the {human_bytes(cap)} a layer of its kind "
                           "may have; not reading it")  # fmt: skip
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise PrepareError(f"cannot read {what}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(file.fileno())
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (status.st_dev, status.st_ino):
            raise PrepareError(f"{what} changed while it was read; not reading it")
        data = file.read(cap + 1)
    if len(data) > cap or len(data) != status.st_size:
        raise PrepareError(f"{what} changed size while it was read; not reading it")
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256.lower():
        raise PrepareError(f"{what} does not hold the bytes its name (sha256:{sha256[:12]}…) says; "
                           "the store is damaged or was altered — pull the model again with Ollama")  # fmt: skip
    return data
