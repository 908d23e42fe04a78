"""What the Generator path does before a short prompt's first token: one pass over the
whole prompt, as the library's own loop does, on a Generator no bigger than the
request needs (rounded up to a power of two for the next turn), whatever the worker
has learnt about its speed. The real worker loop on the real model (``engine:
generator``), in this process; the Generator is the library's, its passes recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dragoman.backends.onnx.worker import loop as worker_loop
from tests.support.worker_in_process import InProcessWorker


class Recorded:
    """The library's Generator, its appended chunks recorded."""

    def __init__(self, generator: Any, passes: list[int]) -> None:
        self._generator = generator
        self._passes = passes

    def append_tokens(self, tokens: Any) -> None:
        self._passes.append(len(tokens))
        self._generator.append_tokens(tokens)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)


class Running(InProcessWorker):
    """The Generator path, its Generators' sizes and passes recorded."""

    def __init__(self, model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes: list[int] = []
        self.capacities: list[int] = []
        real = worker_loop.new_generator

        def recorded(og: Any, model: Any, search: Any, capacity: int) -> Recorded:
            self.capacities.append(capacity)
            return Recorded(real(og, model, search, capacity), self.passes)

        monkeypatch.setattr(worker_loop, "new_generator", recorded)
        super().__init__(model_dir, engine="generator")
        assert self.engine is None


@pytest.fixture
def running(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    worker = Running(model_dir, monkeypatch)
    yield worker
    worker.stop()


def test_a_short_lone_prompt_is_one_pass_on_a_generator_its_size(running: Running) -> None:
    text = "Write a short story about a robot who learns to paint, in three sentences, for a child of six."
    for request_id in range(3):
        # What a busy machine learns from passes with a fixed cost in them (a 54-token
        # pass in a second): it split the prompt, and the first token came a pass later.
        running.worker._seconds_per_prompt_token = 0.02
        running.passes.clear()
        tokens, done = running.ask(request_id, f"{request_id}. {text}", new_tokens=2)
        assert tokens == 2 and done.prompt_tokens > 30
        assert running.passes == [done.prompt_tokens], running.passes
    assert running.capacities and all(c <= 2 * (done.prompt_tokens + 2) for c in running.capacities), running.capacities

