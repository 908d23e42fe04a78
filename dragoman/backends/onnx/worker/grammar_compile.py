"""Compiling a grammar once in a separate, bounded process before the worker does.

llguidance's own limits (lexer fuel, grammar size) do not bound every compilation:
measured with llguidance 1.9.1, an ``allOf`` of 20 ``{"pattern": ".*a.*"}`` … schemas
spends 37 s and 2.3 GB deciding whether the intersection of their regexes is empty
(16 of them: 2.4 s; each one more doubles it), and the build inside onnxruntime-genai
0.18 unrolled ``minItems: 100000000`` until an allocation of 4 GB failed, which aborts
the process. No thread can be stopped and no allocation refused from outside, so the
worker first compiles each grammar in this helper, which runs at the lowest CPU
priority under an address-space limit (POSIX) and is killed at a deadline. Only a
grammar that compiled here within both bounds is compiled again in the worker, where
the same library takes the same time and memory for it.

Helper: ``python -m dragoman.backends.onnx.worker.grammar_compile TOKENIZER_JSON EOS_IDS MEMORY_BYTES``;
requests and replies are length-prefixed UTF-8 frames (grammar in, error text out, empty
when it compiled).
"""

from __future__ import annotations

import contextlib
import os
import queue
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import llguidance

_HEADER = struct.Struct(">I")


def limits() -> llguidance.LLParserLimits:
    """The library's defaults, without parser state in error messages (clients see them)."""
    import llguidance

    return llguidance.LLParserLimits(verbose_errors=False)


def error_text(matcher: llguidance.LLMatcher) -> str:
    """The matcher's error, cut to a length a client can read; empty when none."""
    if not matcher.is_error():
        return ""
    text = " ".join(matcher.get_error().split())
    return text if len(text) <= 300 else text[:300] + "…"


class GrammarRejected(Exception):
    """The grammar is invalid, or compiling it passed the time or memory bound."""

    def __init__(self, message: str, *, too_complex: bool) -> None:
        super().__init__(message)
        self.too_complex = too_complex


class GrammarCheck:
    """The worker's handle on the helper: started on first use, replaced after it is
    killed or dies. Used from one thread at a time (the worker's preparation thread)."""

    def __init__(self, tokenizer_json: Path, eos_ids: list[int], *, timeout: float, memory: int) -> None:
        self.tokenizer_json = tokenizer_json
        self.eos_ids = eos_ids
        self.timeout = timeout
        self.memory = memory
        self._process: subprocess.Popen[bytes] | None = None
        self._replies: queue.Queue[bytes | None] = queue.Queue()

    def check(self, grammar: str) -> None:
        """Returns when ``grammar`` compiles within the bounds; else raises."""
        process = self._helper()
        try:
            _write(process.stdin, grammar.encode())  # type: ignore[arg-type]
        except OSError:
            self._discard()
            raise GrammarRejected("the grammar checker is not running", too_complex=False) from None
        try:
            reply = self._replies.get(timeout=self.timeout)
        except queue.Empty:
            self._discard()
            raise GrammarRejected(
                f"the grammar did not compile within {self.timeout:g} s; simplify the schema", too_complex=True
            ) from None
        if reply is None:  # the helper died: an allocation past its limit aborts it
            self._discard()
            raise GrammarRejected(
                f"compiling the grammar needs more than {self.memory >> 20} MiB; simplify the schema", too_complex=True
            )
        if reply:
            raise GrammarRejected(reply.decode(errors="replace"), too_complex=False)

    def close(self) -> None:
        self._discard()

    def _helper(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._discard()
        self._replies = queue.Queue()
        argv = [sys.executable, "-m", "dragoman.backends.onnx.worker.grammar_compile", str(self.tokenizer_json), ",".join(map(str, self.eos_ids)), str(self.memory)]
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, creationflags=_creation_flags())
        threading.Thread(target=_read_replies, args=(process.stdout, self._replies), daemon=True).start()
        ready = self._replies.get(timeout=60)
        if ready != b"ready":
            process.kill()
            raise GrammarRejected("the grammar checker could not start", too_complex=False)
        self._process = process
        return process

    def _discard(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            with contextlib.suppress(Exception):
                process.wait(5)
                for stream in (process.stdin, process.stdout):
                    if stream is not None:
                        stream.close()


def _creation_flags() -> int:
    """Windows: a lower priority, set at creation; POSIX: none (0, Popen's default), the
    helper lowers its own priority (a ``preexec_fn`` is unsafe in a process with threads)."""
    if sys.platform == "win32":
        return subprocess.BELOW_NORMAL_PRIORITY_CLASS
    return 0


def _read_replies(stream: BinaryIO, replies: queue.Queue[bytes | None]) -> None:
    try:
        while (body := _read(stream)) is not None:
            replies.put(body)
    except (OSError, ValueError):
        pass
    replies.put(None)


def _write(stream: BinaryIO, body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _read(stream: BinaryIO) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack(header)
    body = stream.read(length)
    return body if len(body) == length else None


# -- the helper process ----------------------------------------------------------------


def _limit_memory(extra: int) -> None:
    """Address space: what the helper has mapped now (interpreter, library,
    tokenizer) plus ``extra``. Linux reports it in /proc; elsewhere the limit is
    left to the deadline."""
    try:
        import resource
    except ImportError:  # Windows: the deadline alone bounds it
        return
    try:
        fields = Path("/proc/self/statm").read_text().split()
        mapped = int(fields[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, mapped + extra))


def main(argv: list[str]) -> int:
    import llguidance
    import numpy as np

    tokenizer_json, eos, memory = Path(argv[0]), [int(i) for i in argv[1].split(",") if i], int(argv[2])
    tokenizer = llguidance.LLTokenizer(tokenizer_json.read_text(encoding="utf-8"), eos_token=eos or None)
    mask = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    LIMITS = limits()
    _limit_memory(memory)
    if hasattr(os, "nice"):
        os.nice(19)  # compile with what the model's own threads leave over (loading was not)
    out, source = sys.stdout.buffer, sys.stdin.buffer
    _write(out, b"ready")
    while (body := _read(source)) is not None:
        matcher = llguidance.LLMatcher(tokenizer, body.decode(), log_level=0, limits=LIMITS)  # type: ignore[arg-type]
        if not matcher.is_error():
            matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        _write(out, error_text(matcher).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
