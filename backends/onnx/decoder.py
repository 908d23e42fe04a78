"""The exported decoder run directly with onnxruntime, for batching on CPU.

onnxruntime-genai 0.18 batches only statically on CPU (every row starts together,
none joins later), so the worker runs the model's ONNX session itself: one forward
pass advances every decoding sequence by a token (rows of different lengths: the
attention takes each row's length from its attention-mask sum), and a prompt is
prefilled in chunks on its own row. Measured on SmolLM2-135M int4, 2 cores: one
sequence decodes as fast as the library's Generator, with the same greedy tokens;
4 rows in one pass give ~1.7× the tokens per second of one, 8 rows ~2.4×.

Exactness: a prompt's KV is the same bit for bit whether it is computed in one pass
or in chunks of two tokens or more, and a row's logits in a batch are those it has
alone; a chunk of one token (the decode path) differs in the last bits. The worker
keeps to that (see :mod:`backends.onnx.batch`).

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

from backends.onnx.core_watch import CoreWatch, SpinChoice
from backends.onnx.kv_slab import KvSlab

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
        # backends/onnx/core_watch.py). Its copy of the weights costs memory (+130 MiB
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
    # ones take the cores from whatever else runs (see backends/onnx/core_watch.py).
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


def self_check(decoder: Decoder) -> None:
    """Run at load: the passes the engine relies on give what one plain pass gives (a
    prompt in one pass or in chunks; two rows of different lengths batched or alone).
    A model whose attention does not keep to that is refused (:class:`Unsupported`)."""
    slab = decoder.new_slab(64)
    slab.ensure(3, 16)
    prompt = np.array([1, 2, 3, 4, 5, 6], dtype=np.int64) % max(decoder.vocab_size, 7)
    whole = decoder.prefill(slab, 0, prompt, 0)
    decoder.prefill(slab, 1, prompt[:4], 0)  # a shorter sequence beside it
    decoder.prefill(slab, 2, prompt[:2], 0)
    decoder.prefill(slab, 2, prompt[2:4], 2)
    chunked = decoder.prefill(slab, 2, prompt[4:], 4)
    batched = decoder.decode(slab, np.array([7, 7]), np.array([6, 4]))
    slab.move(2, 0, 6)  # the chunked prefill, decoded alone
    alone = decoder.decode(slab, np.array([7]), np.array([6]))
    if not np.allclose(whole, chunked, atol=1e-3) or not np.allclose(batched[0], alone[0], atol=1e-3):
        raise Unsupported("chunked or batched passes do not give the logits of a plain pass")
