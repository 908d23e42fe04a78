"""The real ONNX worker loop on the real model in the test's own process: commands in
by a queue and reports out by a pipe, as the worker process has them, so a test can
patch what it records (a Generator's passes, the heap trim) before the worker starts."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Any, Literal

from dragoman.backends.onnx.worker.loading import load
from dragoman.backends.onnx.worker_protocol import Done, Shutdown, Start, Tokens, WorkerConfig, decode_report, read_frame
from dragoman.backends.text.segments import Segment

GENERATOR_CONTEXT = 2048  # the Generator path's preparation bound (the batch engine has its slab's)


class InProcessWorker:
    """``engine`` is the config's (``"generator"``, or the default: the batch engine on
    CPU); :meth:`stop` ends it."""

    def __init__(self, model_dir: Path, engine: Literal["auto", "batch", "generator"] = "auto") -> None:
        import onnxruntime_genai as og

        from dragoman.backends.onnx.worker.request_preparation import Preparation
        from dragoman.backends.onnx.worker.loop import Worker

        config = WorkerConfig(model_path=str(model_dir), providers=["cpu"], engine=engine)
        model, self.engine, *_ = load(config)
        read_fd, write_fd = os.pipe()
        self.reports = os.fdopen(read_fd, "rb")
        self.commands: queue.Queue[Any] = queue.Queue()
        preparation = Preparation(
            model_dir, sorted(og.Tokenizer(og.Config(str(model_dir))).eos_token_ids), self.commands,
            context_length=self.engine.slab.max_positions if self.engine else GENERATOR_CONTEXT,
            grammar_timeout=5.0, grammar_memory=512 << 20,
        )  # fmt: skip
        self.out = os.fdopen(write_fd, "wb", buffering=1 << 16)
        self.worker = Worker(og, model, model_dir, self.out, self.commands, preparation, self.engine)
        preparation.begin()
        self.thread = threading.Thread(target=self.worker.run, daemon=True, name="worker")
        self.thread.start()

    def next_report(self) -> Any:
        body = read_frame(self.reports)
        assert body is not None, "the worker closed its reports"
        return decode_report(body)

    def ask(self, request_id: int, text: str, new_tokens: int, context_length: int = 2048) -> tuple[int, Done]:
        """One user turn in the test model's chat template: the tokens reported, and
        the request's ``Done``."""
        prompt = [Segment("<|im_start|>user\n", special=True), Segment(text, special=False),
                  Segment("<|im_end|>\n<|im_start|>assistant\n", special=True)]  # fmt: skip
        self.commands.put(
            Start(request_id=request_id, prompt=prompt, context_length=context_length, max_new_tokens=new_tokens)
        )
        tokens = 0
        while not isinstance(report := self.next_report(), Done):
            tokens += isinstance(report, Tokens)
        assert report.request_id == request_id
        return tokens, report

    def stop(self) -> None:
        self.commands.put(Shutdown())
        self.thread.join(10)
        self.worker.preparation.close()
        self.out.close()
        self.reports.close()
