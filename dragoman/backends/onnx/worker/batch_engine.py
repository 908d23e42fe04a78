"""The batch engine: every active sequence of one model, advanced together.

Each :meth:`BatchEngine.step` runs one decode pass for all sequences that are
generating (one row each, rows ``0..n-1`` of the KV slab) and then, if a prompt is
waiting, one chunk of its prefill on its own row. So a long prompt never stops the
others for long: while they decode, its chunks are sized to take about
``PREFILL_BUDGET`` times one of their steps (at most ``MAX_CHUNK`` tokens), and alone
it goes at ``MAX_CHUNK`` tokens a pass, which is also faster than one pass over the
whole prompt (smaller attention and logits buffers). Among waiting prompts the
shortest goes first.

A new prompt first takes the KV of the longest prefix it shares with a recent one
(:mod:`backends.onnx.worker.prefix_cache`), so only the rest is computed. For its KV to
stay bit for bit what a cold prefill gives (on every CPU; a batched decode is only
within rounding, see :mod:`backends.onnx.worker.decoder`), every prompt position is computed
by a pass of two tokens or more, as a cold prefill computes it: the reused prefix stops at least
two tokens before the end of the prompt, and no chunk leaves a single token behind.
A reply's own tokens have KV from one-token passes, so the next turn of a chat, which
sends them back, would compute them again. When a reply ends and nothing else is
running, they are computed once more as a prompt continuing the cached one (a
"warm-up", on a row of its own, never reported), so the next turn finds the reply in
the cache too: after a pause of a fraction of a second it computes only its new
message. A next turn that arrives sooner waits at most for the rest of the warm-up
and then continues from it, losing nothing; any other request stops the warm-up (what
it computed is kept), so no one waits for another conversation's.

A finished prompt's KV is copied into the cache at the start of the next step, after
its first token has gone out: the copy of a 1,500-token prompt (70 MB here) took tens
of milliseconds of its time to first token. Until then the rows are left as they are
(every change to them keeps the pending copies first).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from dragoman.backends.onnx.worker.decoder import Decoder
from dragoman.backends.onnx.worker.prefix_cache import PrefixCache, shared_prefix
from dragoman.backends.onnx.worker_protocol import Done, Failed, Report
from dragoman.backends.onnx.worker.sequence import Sequence
from dragoman.backends.onnx.worker.token_text import GuideFailed

log = logging.getLogger("dragoman.onnx.worker")

MAX_CHUNK = 64  # prefill tokens a pass: measured fastest here (1,500 tokens: 64 → 570 tok/s, all at once → 220)
MIN_CHUNK = 2  # a one-token pass computes KV differently (the decode path)
WARM_MAX = 1024  # reply tokens a warm-up computes at most (about a second here)
PREFILL_BUDGET = 1.5  # a chunk among decoding streams takes about this many decode steps
EMA = 0.2
PARK_AFTER = 8  # passes a generation waits for its consumer before its row leaves the batch


class BatchEngine:
    def __init__(self, decoder: Decoder, cache: PrefixCache, max_positions: int) -> None:
        self.decoder = decoder
        self.cache = cache
        self.slab = decoder.new_slab(max_positions)
        self.decoding: list[Sequence] = []  # decoding[i] lives in row i
        self.prefilling: list[Sequence] = []  # each on a row past the decoding ones
        self.step_seconds: float | None = None  # decode pass, moving average
        self.chunk = 8  # prefill chunk while others decode, adjusted to PREFILL_BUDGET
        self.to_keep: list[Sequence] = []  # prompts prefilled in the last step, not yet cached

    @property
    def active(self) -> bool:
        return bool(self.decoding or self.prefilling)

    @property
    def runnable(self) -> bool:
        """Something to compute: a prompt to prefill or to cache, or a generation its
        consumer keeps up with."""
        return bool(self.prefilling or self.to_keep) or any(s.runnable for s in self.decoding)

    def find(self, request_id: int) -> Sequence | None:
        return next((s for s in self.sequences() if s.request_id == request_id), None)

    def sequences(self) -> list[Sequence]:
        return [*self.decoding, *self.prefilling]

    # -- admission and removal ---------------------------------------------------------

    def admit(self, sequence: Sequence) -> None:
        """Give ``sequence`` a row and the KV of the longest prefix seen before."""
        self._keep_finished()  # the prompt just prefilled may be this one's prefix
        for warm in [s for s in self.prefilling if s.warm]:
            if shared_prefix(warm.prompt, sequence.prompt) <= warm.computed:
                self._abandon(warm)  # another conversation: it must not wait for this one's warm-up
        rows = {s.row for s in self.prefilling}
        sequence.row = next(r for r in range(len(self.decoding), len(self.decoding) + len(rows) + 1) if r not in rows)
        self.slab.ensure(sequence.row + 1, min(self.slab.max_positions, sequence.prompt_length + 1))
        self.prefilling.append(sequence)
        self._reuse(sequence)

    def cancel(self, request_id: int) -> Sequence | None:
        self._keep_finished()
        for sequence in self.prefilling:
            if sequence.request_id == request_id:
                self._abandon(sequence)
                return sequence
        for sequence in self.decoding:
            if sequence.request_id == request_id:
                self._retire(sequence)
                return sequence
        return None

    def reset(self) -> list[Sequence]:
        """Drop every sequence (after a failed pass); returns the requests' ones."""
        dropped = [s for s in self.sequences() if not s.warm]
        self.decoding, self.prefilling, self.to_keep = [], [], []  # a failed pass: the rows may be damaged
        self.slab.release()
        return dropped

    def _abandon(self, sequence: Sequence) -> None:
        """Stop prefilling ``sequence``; what it computed serves a retry."""
        self.prefilling.remove(sequence)
        if sequence.computed > sequence.reused:
            self._keep(sequence, sequence.computed)
        self._idle()

    def _retire(self, sequence: Sequence) -> None:
        """Remove a decoding sequence; the last row moves into its place."""
        self._keep_finished()
        index = self.decoding.index(sequence)
        last = self.decoding.pop()
        if last is not sequence:
            self.slab.move(last.row, index, last.computed)
            last.row = index
            self.decoding[index] = last
        self._idle()

    def _idle(self) -> None:
        if not self.active:
            self.slab.release()

    # -- one step ----------------------------------------------------------------------

    def step(self) -> list[tuple[Sequence, Report]]:
        """One decode pass and at most one prefill chunk → the reports they produce."""
        self._keep_finished()
        reports: list[tuple[Sequence, Report]] = []
        if any(s.runnable for s in self.decoding):
            reports += self._decode()
        if self.prefilling:
            sequence = min(self.prefilling, key=lambda s: s.pending)
            try:
                reports += self._prefill(sequence)
            except Exception as exc:  # a pass over one prompt's row: only that request is lost
                log.exception("request %s failed in prompt evaluation", sequence.request_id)
                if sequence in self.decoding:
                    self._retire(sequence)
                elif sequence in self.prefilling:
                    self.prefilling.remove(sequence)
                    self._idle()
                if not sequence.warm:  # a warm-up has no one to tell
                    reports.append((sequence, Failed(sequence.request_id, f"prompt evaluation failed: {type(exc).__name__}: {exc}")))
        return reports

    def _decode(self) -> list[tuple[Sequence, Report]]:
        batch = self.decoding[: self._runnable_first()]
        self.slab.ensure(len(batch), max(s.computed for s in batch) + 1)
        tokens = np.array([s.last_token for s in batch], dtype=np.int64)
        lengths = np.array([s.computed for s in batch], dtype=np.int64)
        began = time.perf_counter()
        logits = self.decoder.decode(self.slab, tokens, lengths)
        spent = time.perf_counter() - began
        self.step_seconds = spent if self.step_seconds is None else (1 - EMA) * self.step_seconds + EMA * spent
        reports: list[tuple[Sequence, Report]] = []
        finished: list[Sequence] = []
        replied: list[Sequence] = []
        for sequence, row in zip(list(batch), logits, strict=True):
            if not sequence.runnable:
                # Paused a moment ago, not parked yet: this pass wrote the KV of its next
                # token at the same position, with the same values, a later pass writes again.
                continue
            sequence.computed += 1
            sequence.eval_ns += int(spent * 1e9)
            chosen = _choose(sequence, row)
            reports += [(sequence, r) for r in chosen]
            if chosen and isinstance(chosen[-1], (Done, Failed)):
                finished.append(sequence)
                if isinstance(chosen[-1], Done):
                    replied.append(sequence)
        for sequence in finished:
            self._retire(sequence)
        self._begin_warm_ups(replied)
        return reports

    def _runnable_first(self) -> int:
        """Put the generations that take part in the pass in rows ``0..r-1`` and return
        r: those whose consumers keep up, and those paused for fewer than
        ``PARK_AFTER`` passes. A generation whose client stopped reading waits past
        them, untouched, until it is credited, so it costs the others nothing (before,
        every pass computed it too: six stalled readers cut another stream to a third
        of its speed); one paused only between a slow reader's credits stays in place,
        as moving a row copies its KV. Rows are swapped only when a parked one sits
        before one that takes part."""
        rows = self.decoding
        for sequence in rows:
            sequence.paused_passes = 0 if sequence.runnable else sequence.paused_passes + 1

        def takes_part(sequence: Sequence) -> bool:
            return sequence.paused_passes < PARK_AFTER

        front, back = 0, len(rows) - 1
        while True:
            while front < back and takes_part(rows[front]):
                front += 1
            while front < back and not takes_part(rows[back]):
                back -= 1
            if front >= back:
                return front + (front < len(rows) and takes_part(rows[front]))
            parked, going = rows[front], rows[back]
            self.slab.swap(parked.row, going.row, max(parked.computed, going.computed))
            parked.row, going.row = going.row, parked.row
            rows[front], rows[back] = going, parked

    def _prefill(self, sequence: Sequence) -> list[tuple[Sequence, Report]]:
        if sequence.computed == sequence.reused:
            self._reuse(sequence)  # a prompt kept since it arrived may serve it now
        size = self._chunk_size(sequence.pending)
        start = sequence.computed
        self.slab.ensure(self.slab.rows, start + size + 1)
        began = time.perf_counter()
        logits = self.decoder.prefill(self.slab, sequence.row, sequence.prompt[start : start + size], start)
        spent = time.perf_counter() - began
        sequence.computed += size
        sequence.prompt_eval_ns += int(spent * 1e9)
        progress: list[tuple[Sequence, Report]] = [(sequence, sequence.progress())] if sequence.start.progress else []
        if self._generating() and self.step_seconds:
            budget = PREFILL_BUDGET * self.step_seconds
            if spent > budget:
                self.chunk = max(MIN_CHUNK, int(self.chunk * 0.75))
            elif spent < 0.6 * budget:
                self.chunk = min(MAX_CHUNK, self.chunk + max(1, self.chunk // 4))
        if sequence.pending:
            return progress
        self.prefilling.remove(sequence)
        if sequence.warm:
            self._keep(sequence, sequence.prompt_length)
            self._idle()
            return []
        self._join(sequence)
        self.to_keep.append(sequence)
        chosen = _choose(sequence, logits)
        if chosen and isinstance(chosen[-1], (Done, Failed)):
            self._retire(sequence)
            if isinstance(chosen[-1], Done):
                self._begin_warm_ups([sequence])
        return progress + [(sequence, r) for r in chosen]

    def _chunk_size(self, pending: int) -> int:
        size = min(pending, self.chunk if self._generating() else MAX_CHUNK)
        if pending - size == 1:  # never leave one token for a pass of its own
            size = pending if size < MAX_CHUNK else size - 1
        return max(size, min(pending, MIN_CHUNK))

    def _generating(self) -> bool:
        """Whether others decode beside a prefill (paused ones do not: with only stalled
        readers beside it, a prompt goes at full chunks, not in their steps' share)."""
        return any(s.runnable for s in self.decoding)

    def _join(self, sequence: Sequence) -> None:
        """A prefilled sequence becomes decoding row ``n`` (rows stay packed)."""
        self._keep_finished()
        target = len(self.decoding)
        if sequence.row != target:
            other = next((s for s in self.prefilling if s.row == target), None)
            if other is None:
                self.slab.move(sequence.row, target, sequence.computed)
            else:
                self.slab.swap(sequence.row, target, max(sequence.computed, other.computed))
                other.row = sequence.row
            sequence.row = target
        self.decoding.append(sequence)

    # -- prefix reuse ------------------------------------------------------------------

    def _reuse(self, sequence: Sequence) -> None:
        entry, shared = self.cache.longest(sequence.prompt)
        usable = min(shared, sequence.prompt_length - 2)  # at least two tokens left to compute
        if entry is None or usable <= sequence.computed:
            return
        self.slab.ensure(self.slab.rows, usable + 1)
        self.slab.write(sequence.row, entry.kv, usable)
        sequence.computed = sequence.reused = usable
        if not sequence.warm:
            self.cache.reused_tokens += usable

    def _begin_warm_ups(self, replied: list[Sequence]) -> None:
        """The warm-ups of the replies that ended in this step. Begun in it, they hold
        its Done back by the cache read and a first chunk (70-150 ms here); begun in the
        next step, after the Done went out, they held back whichever request came next
        instead, another conversation's too (a shared system prompt: 250-320 against 90
        ms), as the engine takes commands only between steps."""
        for sequence in replied:
            try:
                self._warm_up(sequence)
            except Exception:  # best effort: the reply has gone out, only its reuse is lost
                log.exception("warm-up after request %s failed", sequence.request_id)
                for warm in [s for s in self.prefilling if s.warm]:
                    self.prefilling.remove(warm)
                self._idle()

    def _warm_up(self, replied: Sequence) -> None:
        """Compute ``replied``'s reply as a prompt continuing its cached one, when
        nothing else runs (it would take a share of their steps) and the reply is worth
        it and not too long."""
        reply = replied.length - replied.prompt_length
        if self.active or not MIN_CHUNK <= reply <= WARM_MAX or replied.length >= self.slab.max_positions:
            return
        warm = replied.continuation()
        self.admit(warm)  # (which caches the prompts pending first)
        if warm.reused < replied.prompt_length:  # its prompt is not cached (too big, or the cache is off)
            self._abandon(warm)

    def _keep_finished(self) -> None:
        """Cache the prompts prefilled in the last step (their rows are still intact: a
        decode pass writes only past the prompt)."""
        for sequence in self.to_keep:
            self._keep(sequence, sequence.prompt_length)
        self.to_keep.clear()

    def _keep(self, sequence: Sequence, length: int) -> None:
        ids = sequence.prompt[:length]
        if not self.cache.covers(ids):
            row = sequence.row
            self.cache.keep(ids, length * self.slab.bytes_per_position(), lambda: self.slab.read(row, length))


def _choose(sequence: Sequence, logits: np.ndarray) -> list[Report]:
    """The sequence's reports for its row of logits; a failure ends only this sequence."""
    try:
        tokens, done = sequence.choose(logits)
    except GuideFailed as exc:
        return [Failed(sequence.request_id, str(exc), status=400)]
    except Exception as exc:
        log.exception("request %s failed", sequence.request_id)
        return [Failed(sequence.request_id, f"generation failed: {type(exc).__name__}: {exc}")]
    return [r for r in (tokens, done) if r is not None]
