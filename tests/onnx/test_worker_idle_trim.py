"""The worker hands the heap's free memory back once the model has been idle a while
(``TRIM_AFTER``), whatever small commands arrive meanwhile: a credit the server sends
for the last tokens it read, or a watchdog ping, reaches the worker after its reply
ended. The real worker loop and batch engine on the real model, in this process; only
the trim itself is recorded (it is a libc call, invisible from outside)."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dragoman.backends.onnx.worker import heap_trim as heap
from dragoman.backends.onnx.worker.loading import load
from dragoman.backends.onnx.worker_protocol import Done, Ping, Pong, Shutdown, Start, WorkerConfig, decode_report, read_frame
from dragoman.backends.text.segments import Segment

TRIM_AFTER = 1.5  # long enough that the test's late command surely lands inside it


class Running:
    def __init__(self, model_dir: Path, trims: list[float]) -> None:
        import onnxruntime_genai as og

        from dragoman.backends.onnx.worker.request_preparation import Preparation
        from dragoman.backends.onnx.worker.loop import Worker

        model, engine, _, _ = load(WorkerConfig(model_path=str(model_dir), providers=["cpu"]))
        assert engine is not None, "the batch engine runs the default model on CPU"
        read_fd, write_fd = os.pipe()
        self.reports = os.fdopen(read_fd, "rb")
        self.commands: queue.Queue[Any] = queue.Queue()
        preparation = Preparation(
            model_dir, sorted(og.Tokenizer(og.Config(str(model_dir))).eos_token_ids), self.commands,
            context_length=engine.slab.max_positions, grammar_timeout=5.0, grammar_memory=512 << 20,
        )  # fmt: skip
        self.out = os.fdopen(write_fd, "wb", buffering=1 << 16)
        self.worker = Worker(og, model, model_dir, self.out, self.commands, preparation, engine)
        preparation.begin()
        self.thread = threading.Thread(target=self.worker.run, daemon=True, name="worker")
        self.thread.start()
        self.trims = trims

    def next_report(self) -> Any:
        body = read_frame(self.reports)
        assert body is not None, "the worker closed its reports"
        return decode_report(body)

    def ask(self, request_id: int, text: str, new_tokens: int) -> Done:
        prompt = [Segment("<|im_start|>user\n", special=True), Segment(text, special=False),
                  Segment("<|im_end|>\n<|im_start|>assistant\n", special=True)]  # fmt: skip
        self.commands.put(Start(request_id=request_id, prompt=prompt, context_length=512, max_new_tokens=new_tokens))
        while not isinstance(report := self.next_report(), Done):
            pass
        assert report.request_id == request_id
        return report

    def stop(self) -> None:
        self.commands.put(Shutdown())
        self.thread.join(10)
        self.worker.preparation.close()
        self.out.close()
        self.reports.close()


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
    running.ask(1, "Say hi.", 1)  # one token: no warm-up, the model is idle at once
    ended = time.monotonic()
    running.commands.put(Ping(7))  # as a late credit or a watchdog ping reaches it
    assert running.next_report() == Pong(7)
    trimmed = wait_for_trim(running.trims, ended)
    assert trimmed is not None, "the idle worker never handed its freed memory back"
    assert trimmed - ended >= TRIM_AFTER * 0.9  # not at once: a burst's next request may come


def test_a_trim_waits_for_the_model_to_go_idle_and_comes_once(running: Running) -> None:
    running.ask(1, "Write a long story about a dragon.", 24)  # a warm-up of its reply follows
    ended = time.monotonic()
    first = wait_for_trim(running.trims, ended)
    assert first is not None and first - ended >= TRIM_AFTER * 0.9
    time.sleep(TRIM_AFTER * 1.5)
    assert len(running.trims) == 1  # idle since: nothing more to hand back
    running.ask(2, "Say hi.", 1)
    assert wait_for_trim(running.trims, time.monotonic()) is not None  # and again after the next request
