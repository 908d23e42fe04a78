"""The exported decoder run directly with onnxruntime, for batching on CPU.

onnxruntime-genai 0.18 batches only statically on CPU (every row starts together,
none joins later), so the worker runs the model's ONNX session itself: one forward
pass advances every decoding sequence by a token (rows of different lengths: the
attention takes each row's length from its attention-mask sum), and a prompt is
prefilled in chunks on its own row. Measured on SmolLM2-135M int4, 2 cores: one
sequence decodes as fast as the library's Generator, with the same greedy tokens;
4 rows in one pass give ~1.7× the tokens per second of one, 8 rows ~2.4×.

What the engine relies on, true on every CPU onnxruntime runs on (x86-64 with AVX2,
AVX-512 or AVX-VNNI, ARM64), and checked at load by :func:`self_check`:

* a prompt's KV is the same whether it is computed in one pass or in chunks of two
  tokens or more: the passes that write it run the same (multi-row) kernels. Measured
  bit for bit (bench/kernel_rounding.py, AVX2: chunks of 2, 3, 7 and 64, 8 prompts of
  4 to 145 tokens, KV bytes and last logits identical), and what the prefix cache's
  reuse rests on; a chunk of one token is the decode path and rounds differently;
* a row's logits in a batch are those it has alone up to kernel rounding, not bit for
  bit: MatMulNBits (int4 weights, accuracy_level 4) picks its kernels by CPU and by the
  number of rows in a pass, and on AVX2 a one-row pass and a pass of several round
  differently, up to 0.027 of the logits' spread (1.3 logits here; the greedy pick
  unchanged in 128 comparisons), where the AVX-512 machines this was first built on
  agreed within 1e-3. The
  same holds between a one-token pass and a prompt chunk, so a reply's KV (one-token
  passes) is within rounding of the same tokens prefilled.

So a greedy answer is the same batched or alone except where two candidates are
within rounding of each other (2 × 0.06 of the spread at most, what self_check
accepts); where they are, the two answers part from there on. The worker keeps every
prompt position computed by a pass of two tokens or more (see :mod:`backends.onnx.worker.batch_engine`),
so a prompt over a reused prefix gets the KV of a cold prefill, and its answer alone is
the cold answer alone.

The model must look like what the library's builder exports for a decoder with
GroupQueryAttention: inputs ``input_ids``, ``attention_mask`` and the past key/value
pairs (``past_present_share_buffer``), outputs ``logits`` and the present pairs. Any
other model is refused here (:class:`Unsupported`) and runs on the library's Generator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from dragoman.backends.onnx.worker.core_watch import CoreWatch
from dragoman.backends.onnx.worker_protocol import SpinChoice
from dragoman.backends.onnx.worker.kv_slab import KvSlab

log = logging.getLogger("dragoman.onnx.worker")

_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
MAX_BINDINGS = 16
AUTO_SPIN_MAX_BYTES = 512 * 1024 * 1024  # weights past this get no second, spinning session


class Unsupported(Exception):
    """The model cannot run on the batch engine (the message says why)."""


@dataclass(frozen=True)
class Layout:
    """What ``genai_config.json`` says about the decoder."""

    filename: str
    layers: int
    kv_heads: int
    head_size: int
    context_length: int
    past_key: str
    past_value: str
    present_key: str
    present_value: str
    eos_token_ids: tuple[int, ...]
    search_defaults: dict[str, Any]


def read_layout(model_dir: Path) -> Layout:
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        model, decoder = config["model"], config["model"]["decoder"]
        inputs, outputs = decoder.get("inputs", {}), decoder.get("outputs", {})
        search = config.get("search", {})
        eos = model.get("eos_token_id", [])
        layout = Layout(
            filename=decoder["filename"],
            layers=int(decoder["num_hidden_layers"]),
            kv_heads=int(decoder["num_key_value_heads"]),
            head_size=int(decoder["head_size"]),
            context_length=int(model["context_length"]),
            past_key=inputs.get("past_key_names", "past_key_values.%d.key"),
            past_value=inputs.get("past_value_names", "past_key_values.%d.value"),
            present_key=outputs.get("present_key_names", "present.%d.key"),
            present_value=outputs.get("present_value_names", "present.%d.value"),
            eos_token_ids=tuple(int(e) for e in (eos if isinstance(eos, list) else [eos])),
            search_defaults=search,
        )
    except (OSError, KeyError, TypeError, ValueError, msgspec.DecodeError) as exc:
        raise Unsupported(f"genai_config.json does not describe a decoder: {type(exc).__name__}: {exc}") from exc
    if not search.get("past_present_share_buffer", False):
        raise Unsupported("the model does not share its past and present KV buffers (no GroupQueryAttention)")
    if "pipeline" in decoder or config["model"].get("type") in ("whisper", "phi3v", "gemma3", "qwen2_5_vl"):
        raise Unsupported(f"model type {config['model'].get('type')!r} is not a plain decoder")
    if decoder.get("sliding_window"):
        # GroupQueryAttention refuses a KV cache shorter than the window, and the slabs
        # start short and grow; the Generator sizes its cache for the window.
        raise Unsupported("sliding-window attention (its KV cache must hold the whole window)")
    return layout


class Decoder:
    """The decoder's onnxruntime session (two with ``spin: auto``), and the two passes
    the worker needs."""

    def __init__(
        self, model_dir: Path, *, threads: int | None = None, spin: SpinChoice = False, watch: CoreWatch | None = None
    ) -> None:
        self.layout = read_layout(model_dir)
        path = model_dir / self.layout.filename
        # The session passes run on: its threads spin only with ``spin: true``.
        self.session = _session(path, threads, spin=spin is True)
        # ``spin: auto``: a second session of the same model whose threads spin, used
        # for the passes run while the other processes leave the cores alone (see
        # dragoman/backends/onnx/worker/core_watch.py). Its copy of the weights costs memory (+130 MiB
        # for the default model), so a model past AUTO_SPIN_MAX_BYTES goes without it.
        self._spinning: Any = None
        self._watch = watch
        if spin == "auto" and _weights_bytes(model_dir, self.layout.filename) <= AUTO_SPIN_MAX_BYTES:
            if watch is None:
                self._watch = watch = CoreWatch()
                watch.start()
            if watch.available:
                self._spinning = _session(path, threads, spin=True)
        self.passes = {"spinning": 0, "sleeping": 0}  # how the passes ran, for tests and benchmarks
        self.spin_mode = "always" if spin is True else "while the cores are quiet" if self._spinning is not None else "never"
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        L = self.layout
        self.past = [name for i in range(L.layers) for name in (L.past_key % i, L.past_value % i)]
        self.present = [name for i in range(L.layers) for name in (L.present_key % i, L.present_value % i)]
        expected = {"input_ids", "attention_mask", *self.past}
        if set(inputs) != expected or not {"logits", *self.present} <= outputs:
            extra = sorted(set(inputs) - expected) + sorted(expected - set(inputs))
            raise Unsupported(f"the decoder's inputs are not the ones the batch engine feeds ({', '.join(extra)})")
        kv_type = inputs[self.past[0]].type
        if kv_type not in _DTYPES:
            raise Unsupported(f"KV cache of type {kv_type}")
        self.kv_dtype = np.dtype(_DTYPES[kv_type])
        logits = next(o for o in self.session.get_outputs() if o.name == "logits")
        if logits.type != "tensor(float)":
            raise Unsupported(f"logits of type {logits.type}")
        vocab = logits.shape[-1]
        self.vocab_size = int(vocab) if isinstance(vocab, int) else 0
        self._ids_dtype = np.int64 if inputs["input_ids"].type == "tensor(int64)" else np.int32
        self._bindings: dict[tuple[bool, int, int], Any] = {}
        self._bindings_for = -1

    def new_slab(self, max_positions: int) -> KvSlab:
        L = self.layout
        return KvSlab(L.layers, L.kv_heads, L.head_size, self.kv_dtype, max_positions)

    def decode(self, slab: KvSlab, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """One token for each of rows ``0..n-1``: ``tokens[i]`` goes to position
        ``lengths[i]`` of row i. Returns logits ``[n, vocab]``."""
        n = len(tokens)
        return self._run(slab, 0, tokens.reshape(n, 1), lengths + 1)[:, -1]

    def prefill(self, slab: KvSlab, row: int, tokens: np.ndarray, start: int) -> np.ndarray:
        """``tokens`` into row ``row`` from position ``start``. Returns the logits of
        the last one ``[vocab]``."""
        return self._run(slab, row, tokens.reshape(1, -1), np.array([start + len(tokens)]))[0, -1]

    def _binding(self, slab: KvSlab, first: int, rows: int, session: Any) -> Any:
        """An IO binding with the cache rows bound in place. Binding the 2 × layers
        buffers costs ~1.5 ms (a tenth of a token step here), so bindings are kept while
        the slab's memory stays where it is."""
        if self._bindings_for != slab.generation:
            self._bindings.clear()
            self._bindings_for = slab.generation
        key = (session is self._spinning, first, rows)
        binding = self._bindings.get(key)
        if binding is None:
            if len(self._bindings) >= MAX_BINDINGS:
                self._bindings.pop(next(iter(self._bindings)))
            binding = session.io_binding()
            shape = (rows, self.layout.kv_heads, slab.capacity, self.layout.head_size)
            for view, past, present in zip(slab.layer_views(first, rows), self.past, self.present, strict=True):
                pointer = view.ctypes.data
                binding.bind_input(past, "cpu", 0, self.kv_dtype, shape, pointer)
                binding.bind_output(present, "cpu", 0, self.kv_dtype, shape, pointer)
            self._bindings[key] = binding
        return binding

    def _run(self, slab: KvSlab, first: int, ids: np.ndarray, totals: np.ndarray) -> np.ndarray:
        rows, steps = ids.shape
        width = int(totals.max())
        assert width <= slab.capacity
        spinning = self._spinning is not None and self._watch is not None and self._watch.quiet()
        session = self._spinning if spinning else self.session
        binding = self._binding(slab, first, rows, session)
        binding.bind_cpu_input("input_ids", np.ascontiguousarray(ids, dtype=self._ids_dtype))
        binding.bind_cpu_input("attention_mask", (np.arange(width)[None, :] < totals[:, None]).astype(np.int64))
        logits = np.empty((rows, steps, self.vocab_size or 1), dtype=np.float32)
        if self.vocab_size:
            binding.bind_output("logits", "cpu", 0, np.float32, logits.shape, logits.ctypes.data)
        else:
            binding.bind_output("logits", "cpu")
        session.run_with_iobinding(binding)
        self.passes["spinning" if spinning else "sleeping"] += 1
        if not self.vocab_size:
            logits = binding.get_outputs()[-1].numpy()
        return logits


def _session(path: Path, threads: int | None, *, spin: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    # Sleeping threads are woken for each of a pass's hundreds of small ops; spinning
    # ones take the cores from whatever else runs (see dragoman/backends/onnx/worker/core_watch.py).
    # A spinning session stops spinning when a pass returns, leaving the cores between
    # steps to the gateway process that forwards each token. Every core unless told.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    if threads:
        options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _weights_bytes(model_dir: Path, filename: str) -> int:
    """The decoder's file and its external data (``model.onnx.data``)."""
    return sum(p.stat().st_size for p in model_dir.glob(f"{filename}*") if p.is_file())


# What self_check accepts as kernel rounding, in :func:`divergence` units (max |Δ| over
# the logits' spread). bench/kernel_rounding.py (AVX2, SmolLM2-135M int4, 8 prompts of
# 4-145 tokens; 128 comparisons of rounding, 24 of wrong layouts): rounding — batched in 2, 4 or 8 rows vs alone, a
# one-token pass vs a prompt chunk, 8 greedy steps on one-token KV vs prefilled — is
# at most 0.027 (median 0.018); a wrong layout — another row's KV, the mask one too
# long or too short — is 0.059-0.61, and at least 0.127 on self_check's short prompts
# (one position off matters least on long prompts). 0.06 is 2.2× the largest rounding
# and 2.1× below the smallest wrong layout self_check builds.
ROUNDING_BOUND = 0.06


def divergence(expected: np.ndarray, got: np.ndarray) -> float:
    """How far ``got`` is from ``expected``: the largest difference of one logit over
    the spread of ``expected`` (max − min), the same figure for a model whose logits
    span 10 as for one whose logits span 50. A bound b on it means a greedy pick can
    differ only where the top two logits are within 2·b·spread of each other."""
    spread = float(expected.max() - expected.min()) or 1.0
    return float(np.abs(got.astype(np.float64) - expected).max()) / spread


@dataclass(frozen=True)
class CheckFigures:
    """What :func:`self_check` measured, as :func:`divergence` figures."""

    chunked: float  # a prompt in chunks against in one pass (last logits)
    chunked_kv_exact: bool  # the same KV bytes
    batched: float  # a row in a batch of three rows against alone
    broken: dict[str, float]  # deliberately wrong layouts against the right one


def measure(decoder: Decoder) -> CheckFigures:
    """The passes the engine relies on against plain ones, and wrong layouts against
    right ones, on two 5-token prompts and a 3-token one (ids spread over the
    vocabulary, past the special tokens). Short prompts: one position more or less
    moves the logits most there."""
    vocab = decoder.vocab_size or 4096  # a vocabulary the graph leaves unnamed: surely this many
    prompt, other, short = ((np.arange(n) * step + 300) % vocab for n, step in ((5, 997), (5, 613), (3, 331)))
    slab = decoder.new_slab(32)
    slab.ensure(4, 8)
    whole = decoder.prefill(slab, 0, prompt, 0)
    kv = slab.read(0, 5)
    decoder.prefill(slab, 1, other, 0)
    decoder.prefill(slab, 2, short, 0)
    for start, end in ((0, 2), (2, 5)):
        chunked = decoder.prefill(slab, 3, prompt[start:end], start)
    chunked_kv_exact = bool(np.array_equal(kv, slab.read(3, 5)))
    token = np.array([int(prompt[1])] * 3)

    def row0(lengths: list[int], kv_of: int = 3) -> np.ndarray:
        """Row 0's logits for ``token`` at ``lengths[0]`` in a batch of three, row 0
        holding row ``kv_of``'s KV (row 3: the prompt, chunked, untouched by decodes)."""
        slab.move(kv_of, 0, slab.capacity)
        return decoder.decode(slab, token, np.array(lengths))[0]

    slab.move(3, 0, slab.capacity)
    alone = decoder.decode(slab, token[:1], np.array([5]))[0]
    batched = row0([5, 5, 3])
    broken = {
        "another row's KV": row0([5, 5, 3], kv_of=1),
        "the mask one too long": row0([6, 5, 3]),
        "the mask one too short": row0([4, 5, 3]),
    }
    return CheckFigures(
        chunked=divergence(whole, chunked),
        chunked_kv_exact=chunked_kv_exact,
        batched=divergence(alone, batched),
        broken={name: divergence(alone, logits) for name, logits in broken.items()},
    )


def self_check(decoder: Decoder) -> CheckFigures:
    """Run at load: refuse the batch engine (:class:`Unsupported`) for a model whose
    passes do not keep to what the engine relies on (module docstring): a chunked
    prefill or a batched row further from one plain pass than kernel rounding goes
    (:data:`ROUNDING_BOUND`), or wrong layouts (another row's KV, the mask one position
    off) that come within it — a decoder that does not separate its rows, and a check
    that could not tell a broken batch from rounding. Exactness of the chunked KV is
    reported, not required: the engine runs without it, only less exactly."""
    figures = measure(decoder)
    for name, value in (("a prompt prefilled in chunks", figures.chunked), ("a row decoded in a batch", figures.batched)):
        if value > ROUNDING_BOUND:
            raise Unsupported(
                f"{name} differs from one plain pass by {value:.3g} of the logits' spread, past the "
                f"{ROUNDING_BOUND:g} that kernel rounding stays within (bench/kernel_rounding.py)"
            )
    for name, value in figures.broken.items():
        if value <= ROUNDING_BOUND:
            raise Unsupported(
                f"{name} changes a row's logits by only {value:.3g} of their spread, within the "
                f"{ROUNDING_BOUND:g} allowed for rounding: the decoder does not separate its rows"
            )
    log.info(
        "batch engine check: a batched row within %.3g of its logits' spread of alone, a chunked prefill "
        "within %.3g (KV %s); wrong layouts %s (bound %g)",
        figures.batched, figures.chunked, "bit for bit" if figures.chunked_kv_exact else "not bit for bit",
        ", ".join(f"{v:.2f}" for v in figures.broken.values()), ROUNDING_BOUND,
    )  # fmt: skip
    return figures
