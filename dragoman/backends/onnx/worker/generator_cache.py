"""Generators of recent requests, kept so that the next request continues from one
instead of starting a new one: the Generator path's prefix cache.

On the library's Generator (CUDA, DirectML, ``engine: generator``, models the batch
engine cannot run) each request has a Generator of its own. A finished one is kept
here with its state; the next request takes the kept Generator sharing the longest
prefix with its prompt, rewinds it there (``rewind_to``) and appends only the rest.
When none shares a prefix, the least recently used one that fits is taken all the
same, rewound to nothing, when a new one would not fit beside the kept ones (it would
be evicted anyway): a new Generator allocates its whole KV cache (the builder's models
share past and present buffers), and touching that memory for the first time is most
of what creating one costs (8,192 positions of the default model: 0.6-1.2 s on a busy
2-core machine, against ~1 ms for a kept one).

Exactness, as on the batch engine: only the prompt's KV is reused, which prefill
passes of two tokens or more computed, never a generated token's (one-token passes
round differently: reused, they moved the next turn's logits by up to 0.96 and changed
its greedy answer at the 12th token). So a next turn recomputes the previous reply
with its new message, and its answer at temperature 0 is the cold one bit for bit
(rewound and cold logits measured equal, difference 0.0).

A Generator's sampling options are fixed when it is made (and a seeded one's random
state moves on), so one is reused only by a request with the same options, never by
a seeded one, and only when its capacity (``max_length``) holds the request. The
grammar of a request is dragoman's own (:mod:`backends.onnx.worker.grammar_mask` masks the
logits), not the Generator's, so guided requests reuse too.

Bounded like the batch engine's prefix cache: ``prefix_cache_mib`` (the KV buffers of
the kept Generators: their whole capacity when the model shares its buffers) and
``prefix_cache_entries``, least recently used first.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from dragoman.backends.onnx.worker.prefix_cache import shared_prefix
from dragoman.backends.onnx.worker_protocol import Search

log = logging.getLogger("dragoman.onnx.worker")

FALLBACK_ITEMSIZE = 4  # fp32: what the KV holds when the model does not say (the larger)


@dataclass(frozen=True)
class KvLayout:
    """What one position of a Generator's KV cache costs, from ``genai_config.json``."""

    layers: int
    kv_heads: int
    head_size: int
    shared_buffer: bool  # the cache is allocated for the whole capacity at once
    present_key: str

    def bytes_per_position(self, itemsize: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_size * itemsize


def read_kv_layout(model_dir: Path) -> KvLayout | None:
    """None when the config does not describe a plain decoder's KV."""
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        decoder = config["model"]["decoder"]
        return KvLayout(
            layers=int(decoder["num_hidden_layers"]),
            kv_heads=int(decoder["num_key_value_heads"]),
            head_size=int(decoder["head_size"]),
            shared_buffer=bool(config.get("search", {}).get("past_present_share_buffer", False)),
            present_key=decoder.get("outputs", {}).get("present_key_names", "present.%d.key"),
        )
    except (OSError, KeyError, TypeError, ValueError, AttributeError, msgspec.DecodeError):
        return None


def capacity_for(budget: int, context: int, window: int) -> int:
    """The ``max_length`` of a new Generator for a request of ``budget`` positions: the
    next power of two, so the next turn of its conversation (a little longer) fits the
    Generator this one leaves; at most the context, at least a sliding window. No more:
    making one costs about its capacity in first-touched memory (a busy 2-core machine:
    256 positions 68 ms, 2,048 positions 670 ms, 43 positions 1.2 ms)."""
    rounded = 1 << max(0, budget - 1).bit_length()
    return max(budget, min(window, context), min(rounded, context))


@dataclass
class Kept:
    generator: Any
    ids: np.ndarray  # the prompt tokens whose KV it holds from prefill passes
    search: Search  # the sampling options it was made with
    capacity: int  # its max_length
    nbytes: int


def reusable(search: Search) -> bool:
    """A seeded request must sample as a new Generator would."""
    return search.random_seed is None


class GeneratorCache:
    def __init__(self, max_bytes: int, max_entries: int, layout: KvLayout | None, min_tokens: int = 16) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.layout = layout
        self.min_tokens = min_tokens  # a shorter shared prefix counts as none
        self._entries: collections.OrderedDict[int, Kept] = collections.OrderedDict()
        self._keys = iter(range(1 << 62))
        self._itemsize: int | None = None  # of the KV, read from the first Generator kept
        self.nbytes = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.max_entries > 0 and self.layout is not None

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, ids: np.ndarray, search: Search, budget: int, capacity: int) -> tuple[Kept | None, int]:
        """Remove and return the kept Generator that serves ``ids`` best (made with
        ``search``, holding ``budget`` positions) and how many of its tokens to keep:
        the one sharing the longest prefix (at most ``len(ids) - 2``: the rest is
        computed by a pass of two tokens or more, as a cold prefill computes it).
        Taking one loses what it held past the shared prefix, so while a new Generator
        (of ``capacity``) fits beside the kept ones, one is taken only for a prefix of
        at least half of what it holds (a conversation's next turn, a long system
        prompt; not the model's default system prompt alone). When none fits, the
        least recently used serves, rewound to nothing: it would be evicted anyway.
        (None, 0) when none serves."""
        if not self.enabled or not reusable(search):
            return None, 0
        full = len(self._entries) >= self.max_entries or self.nbytes + self.new_bytes(capacity) > self.max_bytes
        best, best_key, length = None, None, -1
        for key, kept in self._entries.items():  # least recently used first
            if kept.search != search or kept.capacity < budget:
                continue
            shared = min(shared_prefix(kept.ids, ids), max(0, len(ids) - 2))
            if shared < self.min_tokens or not (full or 2 * shared >= len(kept.ids)):
                shared = 0
            if shared > length and (shared or full):
                best, best_key, length = kept, key, shared
        if best is None or best_key is None:
            return None, 0
        self._drop(best_key)
        return best, length

    def new_bytes(self, capacity: int) -> int:
        """The KV of a new Generator of ``capacity`` (with a shared buffer: all of it)."""
        assert self.layout is not None
        return capacity * self.layout.bytes_per_position(self._itemsize or FALLBACK_ITEMSIZE) if self.layout.shared_buffer else 0

    def keep(self, generator: Any, ids: np.ndarray, search: Search, capacity: int) -> bool:
        """Keep ``generator`` (its prompt ``ids`` computed); False when it may not or does
        not fit, and then it is let go."""
        if not self.enabled or not reusable(search):
            return False
        nbytes = self.kv_bytes(generator, capacity)
        if nbytes > self.max_bytes:
            return False
        ids = np.array(ids, dtype=np.int32)
        for key, kept in list(self._entries.items()):
            if kept.search == search and kept.capacity <= capacity and shared_prefix(kept.ids, ids) == len(kept.ids):
                self._drop(key)  # the new one serves every prompt this one would
        while self._entries and (self.nbytes + nbytes > self.max_bytes or len(self._entries) >= self.max_entries):
            self._drop(next(iter(self._entries)))
        self._entries[next(self._keys)] = Kept(generator, ids, search, capacity, nbytes)
        self.nbytes += nbytes
        return True

    def kv_bytes(self, generator: Any, capacity: int) -> int:
        """What ``generator``'s KV cache holds: its whole capacity with a shared buffer,
        else the positions it has."""
        assert self.layout is not None
        if self._itemsize is None:
            self._itemsize = self._read_itemsize(generator)
        positions = capacity if self.layout.shared_buffer else int(generator.token_count())
        return positions * self.layout.bytes_per_position(self._itemsize)

    def full_context_bytes(self, context: int) -> int:
        """The KV of a Generator of the whole context (a request without a token limit)."""
        return self.new_bytes(context)

    def _read_itemsize(self, generator: Any) -> int:
        assert self.layout is not None
        try:
            return int(np.asarray(generator.get_output(self.layout.present_key % 0)).dtype.itemsize)
        except Exception as exc:  # the estimate errs on the large side
            log.warning("KV element size unknown (%s); counting %d bytes", exc, FALLBACK_ITEMSIZE)
            return FALLBACK_ITEMSIZE

    def _drop(self, key: int) -> None:
        kept = self._entries.pop(key)
        self.nbytes -= kept.nbytes


# What the library continues (rewind_to, then append_tokens): onnxruntime-genai 0.18 refuses
# to append to a Generator that holds tokens on other devices (DirectML), and to rewind these
# model types at all.
CONTINUING_DEVICES = frozenset({"CPU", "CUDA"})
UNREWINDABLE_TYPES = frozenset({"whisper", "phi3v", "decoder-pipeline", "lfm2"})


def why_not_continued(model_dir: Path, device_type: str) -> str | None:
    """Why the library cannot continue this model's Generators on ``device_type``; None when it can."""
    if device_type.upper() not in CONTINUING_DEVICES:
        return f"the library continues a Generator only on {' and '.join(sorted(CONTINUING_DEVICES))}, not {device_type}"
    try:
        kind = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())["model"]["type"]
    except (OSError, KeyError, TypeError, msgspec.DecodeError):
        return "genai_config.json names no model type"
    return f"the library cannot rewind a {kind} model" if kind in UNREWINDABLE_TYPES else None


def open_cache(model_dir: Path, max_bytes: int, max_entries: int, context: int | None, device_type: str) -> GeneratorCache:
    """The Generator path's cache for the model in ``model_dir``, saying in the log when
    it is off or cannot keep a Generator of the whole context."""
    layout = read_kv_layout(model_dir)
    refusal = why_not_continued(model_dir, device_type)
    cache = GeneratorCache(max_bytes, max_entries, layout if refusal is None else None)
    if refusal is not None:
        log.warning("prefix reuse is off for %s: %s", model_dir, refusal)
    elif layout is None:
        log.warning("prefix reuse is off for %s: genai_config.json does not describe its KV cache", model_dir)
    elif not cache.enabled:
        log.info("prefix reuse is off for %s (prefix_cache_mib: 0)", model_dir)
    elif layout.shared_buffer and context and cache.full_context_bytes(context) > max_bytes:
        need = -(-cache.full_context_bytes(context) // (1024 * 1024))
        log.warning(
            "prefix reuse on the Generator path keeps no Generator for requests without a token limit: one of the "
            "whole context (%d tokens) holds about %d MiB of KV, past prefix_cache_mib (%d); raise it to reuse them",
            context, need, max_bytes // (1024 * 1024),
        )  # fmt: skip
    return cache
