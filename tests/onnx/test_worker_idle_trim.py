"""The worker hands the heap's free memory back once the model has been idle a while
(``TRIM_AFTER``), whatever small commands arrive meanwhile: a credit the server sends
for the last tokens it read, or a watchdog ping, reaches the worker after its reply
ended. The real worker loop and batch engine on the real model, in this process; only
the trim itself is recorded (it is a libc call, invisible from outside)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dragoman.backends.onnx.worker import heap_trim as heap
from dragoman.backends.onnx.worker_protocol import Ping, Pong
from tests.support.worker_in_process import InProcessWorker

TRIM_AFTER = 1.5  # long enough that the test's late command surely lands inside it


class Running(InProcessWorker):
    """The batch engine, the heap trims it asked for recorded."""

    def __init__(self, model_dir: Path, trims: list[float]) -> None:
        super().__init__(model_dir)
        assert self.engine is not None, "the batch engine runs the default model on CPU"
        self.trims = trims


@pytest.fixture
def running(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    trims: list[float] = []
    monkeypatch.setattr(heap, "TRIM_AFTER", TRIM_AFTER)
    monkeypatch.setattr(heap, "return_freed_memory", lambda: trims.append(time.monotonic()))
    worker = Running(model_dir, trims)
    yield worker
    worker.stop()


def wait_for_trim(trims: list[float], since: float) -> float | None:
    deadline = time.monotonic() + 4 * TRIM_AFTER
    while time.monotonic() < deadline:
        late = [t for t in trims if t > since]
        if late:
            return late[0]
        time.sleep(0.05)
    return None


def test_a_command_arriving_just_after_a_reply_does_not_cancel_the_idle_trim(running: Running) -> None:
    running.ask(1, "Say hi.", 1, context_length=512)  # one token: no warm-up, the model is idle at once
    ended = time.monotonic()
    running.commands.put(Ping(7))  # as a late credit or a watchdog ping reaches it
    assert running.next_report() == Pong(7)
    trimmed = wait_for_trim(running.trims, ended)
    assert trimmed is not None, "the idle worker never handed its freed memory back"
    assert trimmed - ended >= TRIM_AFTER * 0.9  # not at once: a burst's next request may come


def test_a_trim_waits_for_the_model_to_go_idle_and_comes_once(running: Running) -> None:
    running.ask(1, "Write a long story about a dragon.", 24, context_length=512)  # a warm-up of its reply follows
    ended = time.monotonic()
    first = wait_for_trim(running.trims, ended)
    assert first is not None and first - ended >= TRIM_AFTER * 0.9
    time.sleep(TRIM_AFTER * 1.5)
    assert len(running.trims) == 1  # idle since: nothing more to hand back
    running.ask(2, "Say hi.", 1, context_length=512)
    assert wait_for_trim(running.trims, time.monotonic()) is not None  # and again after the next request
