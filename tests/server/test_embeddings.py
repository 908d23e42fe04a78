"""Embeddings on the real default model (all-minilm) through the real server, with
the official clients: ``ollama`` (``embed``, legacy ``embeddings``), ``openai``
(float and base64) and LangChain's ``OllamaEmbeddings``."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import ollama
import openai
import pytest
from langchain_ollama import OllamaEmbeddings

from tests.support.server import RunningServer

MODEL = "all-minilm"
TEXTS = ["The cat sits on the mat.", "Stock markets fell sharply today.", "A kitten is resting on a rug."]
# Paraphrase pairs and an unrelated sentence for each; every paraphrase pair must be
# closer (cosine) than its pair's first sentence is to the unrelated one, by MARGIN.
MEANING = [
    ("A man is playing a guitar.", "Someone strums a guitar.", "The stock market closed lower today."),
    ("How do I reset my password?", "I forgot my password, how can I change it?", "The recipe needs two eggs."),
    ("The weather is sunny and warm.", "It is a bright, hot day.", "She parked the car in the garage."),
    ("Children are playing in the park.", "Kids play outside in a park.", "The server returned an error code."),
]
MARGIN = 0.3  # measured: the smallest gap is 0.53 (0.576 vs 0.043)


def vectors(reply: object) -> np.ndarray:
    return np.asarray(getattr(reply, "embeddings"), dtype=np.float32)


def test_ollama_embed_gives_unit_vectors_and_counts(real_server: RunningServer) -> None:
    reply = ollama.Client(host=real_server.url).embed(model=MODEL, input=TEXTS)
    got = vectors(reply)
    assert got.shape == (3, 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert reply.model == MODEL and reply.prompt_eval_count > 3 * 5
    assert reply.total_duration and reply.total_duration > 0


def test_ollama_embed_always_carries_the_three_counts(real_server: RunningServer) -> None:
    """As Ollama sends them: the Vercel AI SDK's ollama provider parses total_duration,
    load_duration and prompt_eval_count as required numbers; a loaded model's
    load_duration of 0 was left out and failed the whole reply there."""
    for body in ({"model": MODEL, "input": TEXTS[0]}, {"model": MODEL, "input": TEXTS[0]}, {"model": MODEL}):
        reply = httpx.post(real_server.url + "/api/embed", json=body).json()
        for key in ("total_duration", "load_duration", "prompt_eval_count"):
            assert isinstance(reply.get(key), int) and reply[key] >= 0, (key, reply.keys())


def test_the_same_input_alone_and_inside_a_batch(real_server: RunningServer) -> None:
    client = ollama.Client(host=real_server.url)
    batch = vectors(client.embed(model=MODEL, input=[*TEXTS, "a much longer input " * 20]))
    for i, text in enumerate(TEXTS):
        alone = vectors(client.embed(model=MODEL, input=text))[0]
        assert np.abs(alone - batch[i]).max() < 1e-5


def test_legacy_embeddings_is_the_models_own_vector(real_server: RunningServer) -> None:
    client = ollama.Client(host=real_server.url)
    legacy = np.asarray(client.embeddings(model=MODEL, prompt=TEXTS[0]).embedding)
    modern = vectors(client.embed(model=MODEL, input=TEXTS[0]))[0]
    # all-MiniLM-L6-v2's own pipeline ends in Normalize (modules.json), so its vector is
    # unit length either way, as current Ollama serves it.
    assert np.abs(legacy - modern).max() < 1e-5
    assert client.embeddings(model=MODEL, prompt="").embedding == []


def test_openai_float_and_base64_decode_to_the_same_vectors(real_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused")
    floats = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    default = client.embeddings.create(model=MODEL, input=TEXTS)  # the client asks for base64 and decodes it
    raw = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="base64")
    a = np.asarray([d.embedding for d in floats.data], dtype=np.float32)
    b = np.asarray([d.embedding for d in default.data], dtype=np.float32)
    c = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    assert np.array_equal(a, b) and np.array_equal(b, c)
    assert [d.index for d in floats.data] == [0, 1, 2]
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 0
    ollama_vectors = vectors(ollama.Client(host=real_server.url).embed(model=MODEL, input=TEXTS))
    assert np.abs(a - ollama_vectors).max() < 1e-6


def test_dimensions_truncate_and_renormalise(real_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused")
    full = np.asarray(client.embeddings.create(model=MODEL, input=TEXTS[0], encoding_format="float").data[0].embedding)
    cut = np.asarray(
        client.embeddings.create(model=MODEL, input=TEXTS[0], dimensions=64, encoding_format="float").data[0].embedding
    )
    assert cut.shape == (64,) and abs(np.linalg.norm(cut) - 1) < 1e-5
    assert np.allclose(cut, full[:64] / np.linalg.norm(full[:64]), atol=1e-6)
    short = vectors(ollama.Client(host=real_server.url).embed(model=MODEL, input=TEXTS[0], dimensions=64))[0]
    assert np.abs(short - cut).max() < 1e-6
    with pytest.raises(openai.BadRequestError, match="dimensions: 1000 is more than the model's 384"):
        client.embeddings.create(model=MODEL, input="x", dimensions=1000)


def test_langchain_ollama_embeddings(real_server: RunningServer) -> None:
    embedder = OllamaEmbeddings(model=MODEL, base_url=real_server.url)
    documents = np.asarray(embedder.embed_documents(TEXTS))
    query = np.asarray(embedder.embed_query(TEXTS[0]))
    assert documents.shape == (3, 384)
    assert np.abs(query - documents[0]).max() < 1e-5


def test_paraphrases_are_closer_than_unrelated_sentences(real_server: RunningServer) -> None:
    flat = [s for triple in MEANING for s in triple]
    got = vectors(ollama.Client(host=real_server.url).embed(model=MODEL, input=flat)).reshape(len(MEANING), 3, -1)
    for (a, b, c), triple in zip(got, MEANING):
        paraphrase, unrelated = float(a @ b), float(a @ c)
        assert paraphrase > unrelated + MARGIN, (triple, paraphrase, unrelated)


def test_token_arrays_are_the_models_own_ids(real_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused")
    text = client.embeddings.create(model=MODEL, input="hello world", encoding_format="float").data[0].embedding
    # [CLS] hello world [SEP] in all-MiniLM-L6-v2's vocabulary
    ids = client.embeddings.create(model=MODEL, input=[[101, 7592, 2088, 102]], encoding_format="float")
    assert np.abs(np.asarray(ids.data[0].embedding) - np.asarray(text)).max() < 1e-5
    with pytest.raises(openai.BadRequestError, match="outside the model's vocabulary of 30522"):
        client.embeddings.create(model=MODEL, input=[[100_000]])


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, 400, "embedding model"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, 400, "embedding model"),
        ("/api/generate", {"model": MODEL, "prompt": "hi"}, 400, "embedding model"),
        ("/v1/completions", {"model": MODEL, "prompt": "hi"}, 400, "embedding model"),
        ("/api/embed", {"model": "smollm2:135m", "input": "x"}, 400, "does not support embeddings"),
        ("/v1/embeddings", {"model": "smollm2:135m", "input": "x"}, 400, "does not support embeddings"),
        ("/api/embed", {"model": "nope", "input": "x"}, 404, "not found"),
        ("/api/embed", {"model": MODEL, "input": "word " * 600, "truncate": False}, 400, "input[0] is 602 tokens"),
        ("/v1/embeddings", {"model": MODEL, "input": ["ok", "word " * 600]}, 400, "input[1] is 602 tokens"),
        ("/api/embed", {"model": MODEL, "input": ["x"] * 2049}, 400, "the limit is 2048"),
        ("/api/embed", {"model": MODEL, "input": "x" * 100_001}, 400, "max_embed_input_chars"),
        ("/api/embed", {"model": MODEL, "input": [1, 2]}, 400, "input"),
        ("/v1/embeddings", {"model": MODEL, "input": ""}, 400, "must not be an empty string"),
        ("/v1/embeddings", {"model": MODEL, "input": [{"a": 1}]}, 400, "input[0]"),
        ("/v1/embeddings", {"model": MODEL, "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
        ("/api/embed", {"model": MODEL, "input": "x", "dimensions": 0}, 400, "dimensions"),
    ],
)
def test_bad_requests_get_clear_errors(real_server: RunningServer, path: str, body: dict, status: int, needle: str) -> None:
    answer = httpx.post(real_server.url + path, json=body, timeout=60)
    assert answer.status_code == status, answer.text
    payload = answer.json()
    message = payload["error"]["message"] if path.startswith("/v1/") else payload["error"]
    assert needle in message


def test_long_inputs_are_cut_by_default_in_ollamas_dialect(real_server: RunningServer) -> None:
    reply = ollama.Client(host=real_server.url).embed(model=MODEL, input="word " * 600)
    assert reply.prompt_eval_count == 256  # the model's max_seq_length


def test_empty_input_loads_and_show_lists_the_capability(real_server: RunningServer) -> None:
    reply = httpx.post(real_server.url + "/api/embed", json={"model": MODEL}).json()
    assert reply == {"model": MODEL, "embeddings": []} or reply["embeddings"] == []
    show = httpx.post(real_server.url + "/api/show", json={"model": MODEL}).json()
    assert show["capabilities"] == ["embedding"]
    assert show["model_info"]["bert.embedding_length"] == 384
    assert show["model_info"]["bert.context_length"] == 256
    chat_model = httpx.post(real_server.url + "/api/show", json={"model": "smollm2:135m"}).json()
    assert "embedding" not in chat_model["capabilities"]


def test_metrics_count_embedding_requests_inputs_and_tokens(real_server: RunningServer) -> None:
    ollama.Client(host=real_server.url).embed(model=MODEL, input=["one", "two"])
    text = httpx.get(real_server.url + "/metrics").text
    for name in ("dragoman_embedding_requests_total", "dragoman_embedding_inputs_total",
                 "dragoman_embedding_tokens_total", "dragoman_embedding_duration_seconds_count"):  # fmt: skip
        assert any(line.startswith(name) and f'model="{MODEL}"' in line for line in text.splitlines()), name
