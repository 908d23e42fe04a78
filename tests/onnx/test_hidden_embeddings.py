"""Embeddings from a chat model, as Ollama serves them: one onnx entry whose graph also
outputs ``hidden_states`` (built with the GenAI builder's ``include_hidden_states``)
chats through ONNX Runtime GenAI and embeds through an ONNX Runtime session over the
same graph, pooling the final hidden state at the last token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import ollama
import pytest

from dragoman.backends.onnx.embeddings.model_facts import has_hidden_states
from dragoman.backends.onnx.embeddings.build import prepare_smollm2_hidden
from tests.support.server import RunningServer, config_from_yaml, serve

TEXTS = ["Hi", "The cat sat on the mat.", "A much longer sentence, here so that the others in the batch are padded."]


@pytest.fixture(scope="module")
def hidden_dir(model_home: Path) -> Path:
    return prepare_smollm2_hidden("cpu", home=model_home, progress=False)


@pytest.fixture(scope="module")
def server(hidden_dir: Path) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: smol, backend: onnx, path: "{hidden_dir}", provider: cpu, context_length: 1024}}
        """
    )
    with serve(config) as running:
        yield running


def test_one_entry_chats_and_embeds(server: RunningServer, hidden_dir: Path) -> None:
    assert has_hidden_states(hidden_dir)
    client = ollama.Client(host=server.url)
    show = client.show("smol")
    assert {"completion", "embedding"} <= set(show.capabilities)
    assert show.modelinfo["llama.embedding_length"] == 576
    reply = client.chat(model="smol", messages=[{"role": "user", "content": "What is the capital of France?"}],
                        options={"temperature": 0, "num_predict": 12})  # fmt: skip
    assert "Paris" in reply.message.content
    vectors = np.asarray(client.embed(model="smol", input=TEXTS).embeddings)
    assert vectors.shape == (3, 576)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# Max |Δ| between two unit vectors that kernel rounding allows. A one-token text alone
# is a one-row pass, which MatMulNBits rounds otherwise than a pass of several rows on
# AVX2 (see dragoman/backends/onnx/worker/decoder.py); measured with these texts and "Paris", "def
# f(x): return x * 2" and a 16-token one (onnxruntime directly, AVX2): texts of several
# tokens agree bit for bit, "Hi" and "Paris" by 8.7e-3 and 1.7e-3; pooling another
# token (the one before the last, the first padding, another text's last) moves the
# vector by at least 0.115. 0.03 is 3.4× the rounding and 3.8× below a wrong token.
POOLING_ROUNDING = 0.03


def test_last_token_pooling_alone_and_in_a_batch(server: RunningServer, hidden_dir: Path) -> None:
    """Right padding under causal attention leaves every real token as it was; the
    vector is the last real token's final hidden state, computed here directly, up to
    the rounding of a one-row pass."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    client = ollama.Client(host=server.url)
    batch = np.asarray(client.embed(model="smol", input=TEXTS).embeddings)
    session = ort.InferenceSession(str(hidden_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(hidden_dir / "tokenizer.json"))
    for i, text in enumerate(TEXTS):
        alone = np.asarray(client.embed(model="smol", input=text).embeddings[0])
        assert np.abs(alone - batch[i]).max() < POOLING_ROUNDING
        assert np.abs(alone - batch[i - 1]).max() > 3 * POOLING_ROUNDING  # another text's is far outside it
        ids = np.asarray([tokenizer.encode(text).ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        for item in session.get_inputs():
            if item.name.startswith("past_"):
                feed[item.name] = np.zeros((1, item.shape[1], 0, 64), dtype=np.float32)
        hidden = session.run(["hidden_states"], feed)[0][0, -1]
        assert np.abs(hidden / np.linalg.norm(hidden) - batch[i]).max() < POOLING_ROUNDING
        if ids.shape[1] > 1:  # several tokens: a pass of several rows either way, bit for bit here
            assert np.abs(hidden / np.linalg.norm(hidden) - alone).max() < 1e-4


def test_legacy_endpoint_gives_the_raw_hidden_state(server: RunningServer) -> None:
    raw = httpx.post(server.url + "/api/embeddings", json={"model": "smol", "prompt": TEXTS[1]}, timeout=60).json()
    assert np.linalg.norm(raw["embedding"]) > 2  # not normalised: the model's own output
