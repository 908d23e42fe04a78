"""The model's one worker process, as :class:`~backends.onnx.backend.OnnxBackend` keeps it.

Started when a request needs it (the model built first when it must be), started again
after it died, stopped on unload. A request whose consumer left is cancelled here, and
the worker's later reports for it (no one listens to them any more) confirm the cancel
in its :class:`CancelRecord`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from dragoman.backends.base import Engine
from dragoman.backends.onnx.client import WorkerClient, WorkerGone
from dragoman.backends.onnx.model_files import ModelFiles
from dragoman.backends.onnx.worker_protocol import Cancel, Done, Failed, Ready, Report, Started, Tokens, WorkerConfig
from dragoman.backends.onnx.settings import CancelRecord, OnnxSettings
from dragoman.backends.pull import ProgressCallback

log = logging.getLogger("dragoman.onnx")
events = structlog.get_logger("dragoman.onnx")
KEPT_CANCELLATIONS = 100


class WorkerSlot:
    """``on_start``: called each time a worker has started (a reload may follow a
    rebuild, so what was read from the files before is stale)."""

    def __init__(self, name: str, settings: OnnxSettings, files: ModelFiles, on_start: Callable[[], None]) -> None:
        self.name = name
        self.settings = settings
        self.files = files
        self.on_start = on_start
        self.worker: WorkerClient | None = None
        self.cancellations: collections.OrderedDict[int, CancelRecord] = collections.OrderedDict()
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker is not None and self.worker.alive else None

    async def build(self, progress: ProgressCallback) -> Path:
        """The model's folder, built first when it is the default one and not built yet."""
        async with self._lock:  # one build, whoever asks for it first
            return await self.files.ensure(progress)

    async def ensure(self) -> int:
        """Start the worker unless it runs; the nanoseconds spent loading."""
        async with self._lock:
            if self.worker is not None and self.worker.alive:
                return 0
            began = time.perf_counter_ns()
            model_dir = await self.files.ensure()
            config = WorkerConfig(
                model_path=str(model_dir),
                providers=list(self.files.candidates()),
                provider_options=dict(self.settings.provider_options),
                threads=self.settings.threads,
                spin=self.settings.spin,
                grammar_timeout=self.settings.grammar_timeout,
                grammar_memory=self.settings.grammar_memory,
                engine=self.settings.engine,
                prefix_cache_bytes=self.settings.prefix_cache_mib * 1024 * 1024,
                prefix_cache_entries=self.settings.prefix_cache_entries,
            )
            worker = WorkerClient(
                config, name=self.name, on_orphan=self._on_orphan, stall_timeout=self.settings.stall_timeout
            )
            ready = await worker.start()
            self.worker = worker
            self.files.forget()
            self.on_start()
            self._announce(ready)
            return time.perf_counter_ns() - began

    def _announce(self, ready: Ready) -> None:
        """Say which engine runs the model where `dragoman serve` says the rest: the
        Generator batches no requests, which a user should read where they started the
        server, not find by measuring. A fall back (the config left the choice to
        dragoman, the batch engine refused the model) is a warning as well."""
        print(
            f"dragoman: model '{self.name}' loaded on {ready.provider} ({ready.device_type}) in "
            f"{ready.load_ns / 1e9:.2f} s; {engine_text(Engine(ready.engine, ready.engine_reason))}",
            file=sys.stderr, flush=True,
        )  # fmt: skip
        if ready.engine == "generator" and ready.provider == "cpu" and self.settings.engine == "auto":
            # structlog: the server's own log (JSON off a terminal), where a collector looks for warnings
            events.warning("model fell back to the generator engine", model=self.name, reason=ready.engine_reason)

    async def stop(self) -> None:
        async with self._lock:
            worker, self.worker = self.worker, None
            if worker is not None:
                await worker.stop()
                log.info("unloaded model '%s'", self.name)

    def cancel(
        self, worker: WorkerClient, request_id: int, consumed: int, reports: asyncio.Queue[Report | WorkerGone]
    ) -> bool:
        """Cancel a request its consumer left, unless the reports it did not take already
        hold its end; whether it was cancelled. ``consumed``: the tokens it had taken."""
        if not _still_running(reports):
            return False
        worker.send(Cancel(request_id))
        self.cancellations[request_id] = CancelRecord(request_id, tokens_consumed=consumed)
        while len(self.cancellations) > KEPT_CANCELLATIONS:
            self.cancellations.popitem(last=False)
        return True

    def _on_orphan(self, report: Report) -> None:
        record = self.cancellations.get(getattr(report, "request_id", -1))
        if record is None:
            return
        if isinstance(report, Tokens):
            if record.confirmed.is_set():
                record.tokens_after_confirm += len(report.token_ids)
        elif isinstance(report, (Done, Failed)) and not record.confirmed.is_set():
            record.worker_tokens = report.completion_tokens if isinstance(report, Done) else None
            record.confirmed.set()


def engine_text(engine: Engine) -> str:
    """The engine as the serve output and ``/health/ready`` say it."""
    return f"{engine.name} engine, because {engine.reason}" if engine.reason else f"{engine.name} engine"


def _still_running(reports: asyncio.Queue[Report | WorkerGone]) -> bool:
    """False when the reports not consumed already hold the request's end (it
    finished or failed on its own): then there is nothing to cancel."""
    while not reports.empty():
        if not isinstance(reports.get_nowait(), (Tokens, Started)):
            return False
    return True
