"""One loaded embedding model: tokenizer, ONNX Runtime session, pooling. Blocking.

Everything here runs on worker threads, never on the event loop: ``InferenceSession.run``
releases the GIL for the whole forward pass, so the server keeps answering while a
batch runs (``bench/embeddings.py`` measures the event loop's lag meanwhile). This is
plain ``onnxruntime``, the package the installed onnxruntime-genai flavour depends on
(``onnxruntime``, ``onnxruntime-gpu`` or Windows ML's), so the providers are the chat
model's and no second flavour is installed.

Rows are right-padded. For an encoder the attention mask keeps padding out; for a
decoder, causal attention already keeps every real token from seeing the padding
after it, so a row's vectors are the same alone and in any batch.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dragoman.adapters.errors import BackendError, ContextTooLong, RequestError
from dragoman.backends.onnx.embeddings.model_facts import EmbeddingFacts

# A decoder export that still computes logits allocates (tokens x vocabulary) floats
# per run; its batches are cut to keep that under this many bytes.
LOGITS_BUDGET = 64 * 1024 * 1024
_ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "dml": "DmlExecutionProvider"}


def session_providers(requested: str, available: Sequence[str]) -> list[str]:
    """ONNX Runtime providers to try for the entry's ``provider`` (``auto``: the
    accelerated one this onnxruntime has, then CPU). Raises naming what to install."""
    if requested == "cpu":
        return ["CPUExecutionProvider"]
    if requested == "auto":
        accelerated = [p for p in ("CUDAExecutionProvider", "DmlExecutionProvider") if p in available]
        return accelerated[:1] + ["CPUExecutionProvider"]
    wanted = _ORT_PROVIDERS.get(requested)
    if wanted is None:
        raise BackendError(f"provider must be one of cpu, cuda, dml, auto, not {requested!r}")
    if wanted not in available:
        extra = "cuda" if requested == "cuda" else "directml"
        raise BackendError(
            f"provider '{requested}' needs {wanted}, which this onnxruntime lacks (it has {', '.join(available)}); "
            f"install dragoman[{extra}] in place of the current flavour"
        )
    return [wanted, "CPUExecutionProvider"]


FIRST_CHARS_PER_TOKEN = 8  # the first prefix tried: this many characters a token, then 4 times more


def heads(tokenizer: Any, texts: list[str]) -> list[Any]:
    """``tokenizer.encode_batch(texts)`` for a tokenizer that truncates, tokenizing of
    each text only a prefix long enough not to change the result, so the cost follows
    the model's length, not the input's (a 32 MB input was 38 s of CPU).

    A prefix is long enough when the tokens kept all come from words (the
    pre-tokenizer's pieces) at least two before the prefix's last one: normalizers and
    pre-tokenizers are local, so only the pieces at the cut can differ from the whole
    text's. Otherwise the prefix grows (up to the whole text, always exact); a
    tokenizer without word ids therefore tokenizes everything, as before."""
    limit = tokenizer.truncation["max_length"]
    sizes = [limit * FIRST_CHARS_PER_TOKEN] * len(texts)
    encoded: list[Any] = [None] * len(texts)
    pending = list(range(len(texts)))
    while pending:
        batch = tokenizer.encode_batch([texts[i][: sizes[i]] for i in pending])
        waiting = []
        for i, encoding in zip(pending, batch, strict=True):
            if sizes[i] >= len(texts[i]) or _settled(encoding):
                encoded[i] = encoding
            else:
                sizes[i] *= 4
                waiting.append(i)
        pending = waiting
    return encoded


def _settled(encoding: Any) -> bool:
    if not encoding.overflowing:
        return False  # the prefix fits: what follows it may still belong in
    kept = [w for w in encoding.word_ids if w is not None]
    rest = [w for part in encoding.overflowing for w in part.word_ids if w is not None]
    return bool(kept) and bool(rest) and max(kept) < max(rest) - 1


class EmbeddingRunner:
    def __init__(
        self,
        folder: Path,
        facts: EmbeddingFacts,
        *,
        provider: str = "cpu",
        provider_options: Mapping[str, str] | None = None,
        threads: int | None = None,
        batch_tokens: int = 4096,
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.facts = facts
        options = ort.SessionOptions()
        # Spinning threads between runs would starve the gateway on small machines
        # (the same reason as the chat worker's; see dragoman/backends/onnx/providers.py).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.inter_op_num_threads = 1
        if threads:
            options.intra_op_num_threads = threads
        providers = session_providers(provider, ort.get_available_providers())
        accelerated = {p: dict(provider_options or {}) for p in providers if p != "CPUExecutionProvider"}
        chosen = [(p, accelerated[p]) if p in accelerated else p for p in providers]
        try:
            self.session = ort.InferenceSession(facts.onnx_file, options, providers=chosen)
        except Exception as exc:  # ORT raises its own classes (Fail, InvalidGraph, …)
            raise BackendError(f"could not load {facts.onnx_file}: {exc}") from exc
        self.provider = self.session.get_providers()[0]
        inputs = {i.name: i for i in self.session.get_inputs()}
        self._input_names = set(inputs)
        self._past = [
            (name, _past_shape(i.shape, facts.head_size), _dtype(i.type)) for name, i in inputs.items() if name.startswith("past_")
        ]
        outputs = [o for o in self.session.get_outputs()]
        self._output = _pick_output([o.name for o in outputs], facts.pooling)
        self._pooled = len(next(o.shape for o in outputs if o.name == self._output)) == 2
        logits = next((o for o in outputs if o.name == "logits"), None)
        vocab = logits.shape[-1] if logits is not None and isinstance(logits.shape[-1], int) else None
        self.batch_tokens = max(1, min(batch_tokens, LOGITS_BUDGET // (4 * vocab))) if vocab else batch_tokens
        tokenizer_file = Path(folder) / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise BackendError(f"{folder} holds no tokenizer.json (the model's tokenizer is needed)")
        self._tokenizer_json = tokenizer_file.read_text(encoding="utf-8")
        self._tokenizers: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._make_tokenizer = Tokenizer.from_str
        self.vocab_size = self._tokenizer(facts.max_length or 512).get_vocab_size(with_added_tokens=True)

    # -- tokens ---------------------------------------------------------------------------

    def _tokenizer(self, limit: int) -> Any:
        """A tokenizer truncating at ``limit`` (the model's own files may pad or cut to
        another length; sentence-transformers sets its ``max_seq_length`` the same way)."""
        with self._lock:
            tokenizer = self._tokenizers.get(limit)
            if tokenizer is None:
                tokenizer = self._make_tokenizer(self._tokenizer_json)
                tokenizer.no_padding()
                tokenizer.enable_truncation(limit)
                if len(self._tokenizers) >= 8:
                    self._tokenizers.pop(next(iter(self._tokenizers)))
                self._tokenizers[limit] = tokenizer
            return tokenizer

    def limit(self, num_ctx: int | None) -> int:
        model = self.facts.max_length or 512
        return min(model, num_ctx) if num_ctx and num_ctx > 0 else model

    def tokenize(
        self, inputs: Sequence[str | list[int]], *, limit: int, truncate: bool, max_tokens: int | None
    ) -> list[list[int]]:
        """Token ids per input, cut to ``limit`` or refused (naming the input and both
        lengths) when ``truncate`` is false; and the whole request bounded."""
        tokenizer = self._tokenizer(limit)
        texts = [(i, item) for i, item in enumerate(inputs) if isinstance(item, str)]
        strings = [text for _, text in texts]
        # Cut anyway: only as much of each text is tokenized as the first ``limit``
        # tokens need. Refused when too long: the error names the whole length.
        encoded = (heads(tokenizer, strings) if truncate else tokenizer.encode_batch(strings)) if strings else []
        rows: list[list[int]] = [[] for _ in inputs]
        for (i, text), encoding in zip(texts, encoded):
            if encoding.overflowing and not truncate:
                full = len(self._tokenizer(1 << 30).encode(text).ids)
                raise ContextTooLong(
                    f"input[{i}] is {full} tokens, more than the model's context of {limit} tokens; "
                    "shorten it, or let it be cut (Ollama: truncate: true)",
                    param=f"input[{i}]",
                )
            rows[i] = encoding.ids
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                continue
            bad = next((t for t in item if t >= self.vocab_size), None)
            if bad is not None:
                raise RequestError(
                    f"input[{i}]: token id {bad} is outside the model's vocabulary of {self.vocab_size}",
                    param=f"input[{i}]",
                )
            if len(item) > limit and not truncate:
                raise ContextTooLong(
                    f"input[{i}] is {len(item)} tokens, more than the model's context of {limit} tokens",
                    param=f"input[{i}]",
                )
            rows[i] = list(item[:limit])
        total = sum(len(r) for r in rows)
        if max_tokens is not None and total > max_tokens:
            raise RequestError(
                f"input: {total} tokens in one request; the limit is {max_tokens} (server.limits.max_embed_tokens)",
                param="input",
            )
        return rows

    # -- model ----------------------------------------------------------------------------

    def run(self, rows: Sequence[list[int]]) -> np.ndarray:
        """Pooled float32 vectors of one batch, right-padded to its longest row."""
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        width = max(int(lengths.max()), 1)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
        feed: dict[str, np.ndarray] = {"input_ids": ids}
        if "attention_mask" in self._input_names:
            feed["attention_mask"] = mask
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        if "position_ids" in self._input_names:
            feed["position_ids"] = np.broadcast_to(np.arange(width, dtype=np.int64), ids.shape).copy()
        for name, shape, dtype in self._past:
            feed[name] = np.zeros((len(rows), shape[1], 0, shape[3]), dtype=dtype)
        hidden = self.session.run([self._output], feed)[0]
        return pool(np.asarray(hidden, dtype=np.float32), mask, lengths, self.facts.pooling, pooled=self._pooled)


def pool(hidden: np.ndarray, mask: np.ndarray, lengths: np.ndarray, pooling: str, *, pooled: bool) -> np.ndarray:
    """(rows, dims) from (rows, tokens, dims) as the model's pooling says."""
    if pooled:
        return hidden
    if pooling == "cls":
        return hidden[:, 0, :]
    if pooling == "last":
        return hidden[np.arange(len(lengths)), np.maximum(lengths - 1, 0), :]
    weights = mask[:, :, None].astype(np.float32)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def _pick_output(names: list[str], pooling: str) -> str:
    preferred = ["hidden_states", "last_hidden_state"] if pooling == "last" else ["last_hidden_state", "hidden_states"]
    for name in [*preferred, "sentence_embedding", "token_embeddings"]:
        if name in names:
            return name
    if not names:
        raise BackendError("the ONNX model has no outputs")
    return names[0]


def _past_shape(shape: list[Any], head_size: int | None) -> list[Any]:
    """(batch, kv heads, length, head size); the GenAI builder leaves the head size
    symbolic, and genai_config.json states it."""
    if len(shape) == 4 and not isinstance(shape[3], int) and head_size:
        shape = [*shape[:3], head_size]
    if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
        raise BackendError(f"a past key/value input of shape {shape} is not (batch, heads, length, head size)")
    return shape


def _dtype(onnx_type: str) -> Any:
    return np.float16 if "float16" in onnx_type else np.float32
