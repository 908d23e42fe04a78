"""Rows of every waiting request run together, a model run at a time.

A request's rows are sorted by length so that each batch pads little, and queued
behind earlier requests' rows; one runner takes rows from the head of the queue, as
many as fit ``batch_size`` rows and ``batch_tokens`` padded tokens, runs them on the
model's thread and hands each request its vectors. A lone request never waits for
company; requests that arrive while a batch runs share the next one, which on a CPU
is several times faster than running them one by one (``bench/embeddings.py``).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import numpy as np

RunBatch = Callable[[Sequence[list[int]]], np.ndarray]


class _Job:
    __slots__ = ("rows", "order", "vectors", "next", "done", "future")

    def __init__(self, rows: list[list[int]], future: asyncio.Future[np.ndarray]) -> None:
        self.order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        self.rows = [rows[i] for i in self.order]
        self.vectors: np.ndarray | None = None
        self.next = 0  # first row not yet taken into a batch
        self.done = 0  # rows whose vectors arrived
        self.future = future


class BatchQueue:
    def __init__(self, run: RunBatch, executor: Executor, *, batch_size: int, batch_tokens: int) -> None:
        self._run = run
        self._executor = executor
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self._jobs: collections.deque[_Job] = collections.deque()
        self._runner: asyncio.Task[None] | None = None
        self.batches = 0  # model runs so far (tests and metrics read it)

    @property
    def idle(self) -> bool:
        return not self._jobs and (self._runner is None or self._runner.done())

    async def submit(self, rows: list[list[int]]) -> np.ndarray:
        """The vectors of ``rows``, in order. Cancelling drops rows not yet run."""
        loop = asyncio.get_running_loop()
        job = _Job(rows, loop.create_future())
        self._jobs.append(job)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._drain(), name="embedding-batches")
        return await job.future

    def _take(self) -> list[tuple[_Job, int, int]]:
        """(job, first row, end row) pieces of the next batch, in queue order."""
        pieces: list[tuple[_Job, int, int]] = []
        count = width = 0
        while self._jobs:
            job = self._jobs[0]
            if job.future.done():  # cancelled: its rows need not run
                self._jobs.popleft()
                continue
            start = end = job.next
            while end < len(job.rows):
                new_width = max(width, len(job.rows[end]), 1)
                if count and (count + 1 > self.batch_size or (count + 1) * new_width > self.batch_tokens):
                    break
                count, width, end = count + 1, new_width, end + 1
            if end > start:
                pieces.append((job, start, end))
                job.next = end
            if job.next < len(job.rows):
                break  # the batch is full
            self._jobs.popleft()
        return pieces

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while pieces := self._take():
            rows = [row for job, start, end in pieces for row in job.rows[start:end]]
            try:
                vectors = await loop.run_in_executor(self._executor, self._run, rows)
            except Exception as exc:  # this batch's requests fail; the queue carries on
                for job, _, _ in pieces:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            self.batches += 1
            offset = 0
            for job, start, end in pieces:
                part = vectors[offset : offset + end - start]
                offset += end - start
                self._deliver(job, start, part)

    @staticmethod
    def _deliver(job: _Job, start: int, part: np.ndarray) -> None:
        if job.future.done():
            return
        if job.vectors is None:
            job.vectors = np.empty((len(job.rows), part.shape[1]), dtype=np.float32)
        job.vectors[start : start + len(part)] = part
        job.done += len(part)
        if job.done == len(job.rows):
            restored = np.empty_like(job.vectors)
            restored[job.order] = job.vectors
            job.future.set_result(restored)
