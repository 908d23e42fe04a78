"""The server's handle on one worker process: start it, send commands, route reports.

Reports are routed by ``request_id`` to per-request queues. Reports for a request no
longer listened to (it was cancelled) go to ``on_orphan``, which is how cancellations
are confirmed. If the worker dies, every listener receives :class:`WorkerGone`.

While requests are active the worker is pinged every second; a worker that answers
nothing for ``stall_timeout`` seconds (stopped, or stuck in a library call) is killed,
and its requests end with an error that says so; the next request starts a new one.
What the worker wrote to stderr goes to the server's log, never into an error a client
sees.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from dragoman.adapters.errors import BackendError
from dragoman.backends.onnx.worker_protocol import (
    HEADER,
    Command,
    LoadFailed,
    Ping,
    Pong,
    Ready,
    Report,
    Shutdown,
    WorkerConfig,
    decode_report,
    encode_frame,
    frame_length,
)

log = logging.getLogger("dragoman.onnx")
PROJECT_ROOT = Path(__file__).resolve().parents[3]
STDERR_TAIL = 20
PING_INTERVAL = 1.0


class WorkerGone(msgspec.Struct, frozen=True):
    """Put on every listener's queue when the worker process ends unexpectedly."""

    message: str


class WorkerClient:
    def __init__(
        self, config: WorkerConfig, *, name: str, on_orphan: Callable[[Report], None] | None = None,
        stall_timeout: float = 30.0,
    ) -> None:  # fmt: skip
        self.config = config
        self.name = name
        self.on_orphan = on_orphan
        self.stall_timeout = stall_timeout
        self.ready: Ready | None = None
        self.last_heard = time.monotonic()
        self._pings = itertools.count(1)
        self._failure: str | None = None  # why it was stopped, when it was the watchdog
        self._process: asyncio.subprocess.Process | None = None
        self._listeners: dict[int, asyncio.Queue[Report | WorkerGone]] = {}
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    @property
    def alive(self) -> bool:
        process = self._process
        return process is not None and process.returncode is None and not self._closing and not _exited(process.pid)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def start(self, timeout: float = 300.0) -> Ready:
        """Spawn the worker and wait until its model is loaded."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dragoman.backends.onnx.worker.process", msgspec.json.encode(self.config).decode(),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, cwd=str(PROJECT_ROOT),
        )  # fmt: skip
        self._tasks.append(asyncio.create_task(self._log_stderr(), name=f"onnx-stderr-{self.name}"))
        try:
            first = await asyncio.wait_for(self._read_report(), timeout)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            await self._reap()
            log.error("the model worker for '%s' exited while loading; its last output: %s", self.name, self._stderr_tail())
            raise BackendError(f"the model worker for '{self.name}' exited while loading ({self._exit_text()})") from exc
        except TimeoutError as exc:
            await self.stop()
            raise BackendError(f"the model worker for '{self.name}' did not load within {timeout:.0f}s") from exc
        if isinstance(first, LoadFailed):
            await self.stop()
            raise BackendError(f"could not load model '{self.name}' from {self.config.model_path}: {first.message}")
        if not isinstance(first, Ready):
            await self.stop()
            raise BackendError(f"the model worker for '{self.name}' sent {type(first).__name__} before Ready")
        self.ready = first
        self._tasks.append(asyncio.create_task(self._route_reports(), name=f"onnx-reports-{self.name}"))
        self._tasks.append(asyncio.create_task(self._watch(), name=f"onnx-watchdog-{self.name}"))
        return first

    def listen(self, request_id: int) -> asyncio.Queue[Report | WorkerGone]:
        reports: asyncio.Queue[Report | WorkerGone] = asyncio.Queue()
        if not self.alive:
            reports.put_nowait(WorkerGone(f"the model worker for '{self.name}' is not running"))
        if not self._listeners:  # silence counts from the first active request, not the idle tick before it
            self.last_heard = time.monotonic()
        self._listeners[request_id] = reports
        return reports

    def forget(self, request_id: int) -> None:
        self._listeners.pop(request_id, None)

    def send(self, command: Command) -> None:
        """Queue a command for the worker. Synchronous, so it works in ``finally``
        blocks of cancelled generators; the pipe's buffer absorbs the small frames.
        Raises :class:`~backends.onnx.worker_protocol.FrameTooLarge` before writing anything
        when the command cannot be one frame: that request is refused, the worker
        never sees a broken frame."""
        frame = encode_frame(command)
        if self.alive:
            self._write_frame(frame)

    def _write(self, command: Command) -> None:
        self._write_frame(encode_frame(command))

    def _write_frame(self, frame: bytes) -> None:
        if self._process is None or self._process.stdin is None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            self._process.stdin.write(frame)

    async def stop(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit; terminate, then kill, if it does not."""
        process = self._process
        if process is None:
            return
        self._closing = True
        if process.returncode is None:
            self._write(Shutdown())
            with contextlib.suppress(ConnectionError, RuntimeError, AttributeError):
                process.stdin.close()  # type: ignore[union-attr]
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), timeout)
                except TimeoutError:
                    process.kill()
                    await process.wait()
        await self._reap()
        self._notify_gone(f"model '{self.name}' was unloaded")

    async def _read_report(self) -> Report:
        stdout = self._process.stdout  # type: ignore[union-attr]
        header = await stdout.readexactly(HEADER.size)  # type: ignore[union-attr]
        body = await stdout.readexactly(frame_length(header))  # type: ignore[union-attr]
        return decode_report(body)

    async def _route_reports(self) -> None:
        try:
            while True:
                report = await self._read_report()
                self.last_heard = time.monotonic()
                if isinstance(report, Pong):
                    continue
                listener = self._listeners.get(report.request_id)  # type: ignore[union-attr]
                if listener is not None:
                    listener.put_nowait(report)
                elif self.on_orphan is not None:
                    self.on_orphan(report)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:  # a malformed frame: the worker cannot be trusted any more
            log.exception("bad report from the model worker for '%s'", self.name)
            if self._process is not None and self._process.returncode is None:
                self._process.kill()
        if self._process is not None:
            await self._process.wait()
        if self._tasks and not self._tasks[0].done():  # let the stderr tail arrive
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._tasks[0]), 1.0)
        if not self._closing:
            message = self._failure or f"the model worker for '{self.name}' died ({self._exit_text()})"
            log.error("%s; its last output: %s", message, self._stderr_tail() or "(none)")
            self._notify_gone(message)

    async def _watch(self) -> None:
        """Ping while requests are active; kill a worker silent for ``stall_timeout``."""
        while self.alive:
            await asyncio.sleep(min(PING_INTERVAL, self.stall_timeout / 2))
            now = time.monotonic()
            if not self._listeners:
                self.last_heard = now  # idle time is not silence
                continue
            silent = now - self.last_heard
            if silent > self.stall_timeout and self._process is not None and self._process.returncode is None:
                self._failure = (
                    f"the model worker for '{self.name}' stopped responding (nothing for {silent:.0f} s while "
                    f"requests were running); it was stopped, and the next request starts a new one"
                )
                self._process.kill()
                return
            self._write(Ping(next(self._pings)))

    async def _log_stderr(self) -> None:
        stderr = self._process.stderr  # type: ignore[union-attr]
        while line := await stderr.readline():  # type: ignore[union-attr]
            text = line.decode(errors="replace").rstrip()
            self._stderr.append(text)
            log.info("%s", text)

    def _notify_gone(self, message: str) -> None:
        for listener in self._listeners.values():
            listener.put_nowait(WorkerGone(message))
        self._listeners.clear()

    def _exit_text(self) -> str:
        """How the process ended, for clients: never its output (that is logged)."""
        code = self._process.returncode if self._process else None
        if code is None:
            return "still running"
        status = f"exit status {code}" if code >= 0 else f"killed by signal {-code}"
        return f"{status}; its last output is in the server log"

    def _stderr_tail(self) -> str:
        return " | ".join(line for line in self._stderr if line)[-1500:]

    async def _reap(self) -> None:
        if self._process is not None and self._process.returncode is None:
            await self._process.wait()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current and not task.done():
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 2.0)
                task.cancel()


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has ended or is ending, asked of the kernel without
    reaping it. The event loop reaps it and sets ``returncode`` moments later; a request
    arriving in between (measured from outside: up to ~10 ms after a kill, while the
    process's threads were still being torn down) was sent to the dead worker and failed
    with a 502 instead of starting a new one. ``WNOWAIT`` leaves the exit status for the
    loop's own wait; a process whose main thread is a zombie while its other threads end
    is not waitable yet, and only Linux's /proc shows it (elsewhere: the loop's word)."""
    if hasattr(os, "waitid"):
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already (its returncode is on its way)
            return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False
