"""Running :mod:`.worker` as a child process: what it is asked to do (:class:`WorkerSpec`),
its output turned into progress stages, each stage's time and peak RSS recorded."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from dragoman.backends.onnx.prepare.catalogue import StageRecord
from dragoman.backends.onnx.prepare.support import PeakRss, PrepareError, Progress


class WorkerSpec(msgspec.Struct, omit_defaults=True):
    """What :mod:`.worker` does: dequantize ``gguf`` into ``hf_dir`` (when set; with
    ``stream``, only its tokenizer and config, the builder then reading the weights layer
    by layer from the GGUF: :mod:`.streaming`), run the builder on ``hf_dir`` into ``out``
    (``extra``: the builder's --extra_options), and install ``template`` as the chat
    template."""

    hf_dir: str
    out: str
    cache: str
    precision: str
    provider: str
    gguf: str | None = None
    template: str | None = None
    extra_eos: list[str] = []
    extra: dict[str, str] = {}
    stream: bool = False


def run_worker(spec: WorkerSpec, spec_file: Path, bar: Progress, *, verbose: bool = False) -> list[StageRecord]:
    """Run the worker as a child process, turning its output into ``bar``'s stages
    (2: dequantize when there is a GGUF, then the builder) and returning each stage's
    time and peak RSS. Raises :class:`PrepareError` with the worker's reason."""
    spec_file.write_bytes(msgspec.json.encode(spec))
    command = [sys.executable, "-m", "dragoman.backends.onnx.prepare.worker", str(spec_file)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parents[4])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    reader = _WorkerOutput(bar, gguf=spec.gguf is not None, verbose=verbose)
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=root) as process:
        rss = PeakRss(process.pid)
        # A pipe opened with Popen's default buffering reads through a BufferedReader,
        # whose read1 returns what has arrived instead of waiting for 64 KiB.
        assert isinstance(process.stdout, io.BufferedReader)
        buffer = b""
        while chunk := process.stdout.read1(65536):
            buffer += chunk
            *pieces, buffer = re.split(rb"[\r\n]", buffer)
            for piece in pieces:
                reader.line(piece.decode("utf-8", errors="replace"), rss)
        reader.line(buffer.decode("utf-8", errors="replace"), rss)
    peak = rss.stop()
    if process.returncode != 0:
        raise PrepareError(reader.failure(process.returncode))
    return reader.finish(peak)


class _WorkerOutput:
    """Turns the worker's output into stages and bars, and keeps a tail for errors."""

    LAYER = re.compile(r"Reading (?:layer (\d+)|final norm|LM head)")
    COUNT = re.compile(r"(\d+)/(\d+) \[")

    def __init__(self, bar: Progress, *, gguf: bool, verbose: bool) -> None:
        self.bar = bar
        self.gguf = gguf
        self.verbose = verbose
        self.tail: list[str] = []
        self.stages: list[StageRecord] = []
        self.current: tuple[str, float] | None = None
        self.layers = 0

    def _begin(self, name: str, text: str, rss: PeakRss) -> None:
        self._end(rss.peak)
        self.current = (name, time.perf_counter())
        number = {"check": 1, "convert": 2, "build": 3 if self.gguf else 2}[name]
        self.bar.stage(number, text)

    def _end(self, peak: int) -> None:
        if self.current is not None:
            name, since = self.current
            self.stages.append(StageRecord(name, round(time.perf_counter() - since, 1), peak))
            self.current = None

    def line(self, text: str, rss: PeakRss) -> None:
        text = text.rstrip()
        if not text:
            return
        self.tail = [*self.tail[-39:], text]
        if text.startswith("@stage "):
            name, _, label = text[7:].partition(" ")
            self._begin(name, label, rss)
        elif text.startswith("@layers "):
            self.layers = int(text.split()[1])
        elif text.startswith("@note "):
            self.bar.note(f"note: {text[6:]}")
        elif (match := self.LAYER.search(text)) and self.layers:
            done = int(match.group(1)) + 1 if match.group(1) else self.layers
            self.bar.update(done, self.layers, "layers")
        elif (match := self.COUNT.search(text)) and ("tensors" in text or "Saving" in text):
            self.bar.update(int(match.group(1)), int(match.group(2)), "tensors")
        elif self.verbose and "[INFO]" not in text:
            self.bar.note(text)

    def finish(self, peak: int) -> list[StageRecord]:
        self._end(peak)
        # The process's high-water mark only grows: the last stage's figure is the
        # whole process's peak, each earlier one the peak up to its end.
        return self.stages

    def failure(self, code: int) -> str:
        """The worker's own reason when it gave one; for a crash, a line saying so,
        the crash's output going to stderr (a terminal, or a server's log) — not into
        the reason, which a server sends to whoever asked for the build."""
        errors = [t for t in self.tail if t.startswith("error:")]
        if errors:
            return errors[-1][len("error: "):]
        last = "\n".join(t for t in self.tail if not t.startswith("@"))[-3000:]
        print(f"the build's worker failed (exit status {code}); its last output:\n{last}", file=sys.stderr)
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return (f"the build's worker stopped with an internal error ({how}); its output is logged "
                "(on the terminal, or in the server's log) — please report it with that output")
