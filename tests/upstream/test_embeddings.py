"""Embeddings through upstreams: every client dialect reaches every upstream dialect.

The replay servers answer in the shapes Ollama (``/api/embed``, legacy
``/api/embeddings``), OpenAI (float and base64) and vLLM send; the tests check what
the upstream received (paths, fields translated) and what the client got back.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import numpy as np
import ollama
import openai
import pytest

from tests.support.replay import ReplayServer, Reply, TRANSCRIPTS, replay_server
from tests.support.server import RunningServer, config_from_yaml, free_port, serve

OPENAI_EMBED: dict[str, Reply | list[Reply]] = {
    "oa-float": Reply("openai/embeddings_float.json"),
    "oa-b64": Reply("openai/embeddings_base64.json"),
    "oa-vllm": Reply("openai/vllm_embeddings.json"),
    "oa-one": Reply("openai/embeddings_one.json"),
    "oa-long": Reply("openai/embeddings_too_long.json", status=400),
    "oa-503": Reply("openai/error_503.json", status=503),
}
OLLAMA_EMBED: dict[str, Reply | list[Reply]] = {
    "ol-embed": Reply("ollama/embed_two.json"),
    "ol-legacy": Reply("ollama/embeddings_legacy.json"),
    "ol-long": Reply("ollama/embed_too_long.json", status=400),
}


def recorded(name: str) -> np.ndarray:
    body = json.loads((TRANSCRIPTS / name).read_text())
    if "embeddings" in body:
        return np.asarray(body["embeddings"], dtype=np.float32)
    rows = [r["embedding"] for r in sorted(body["data"], key=lambda d: d["index"])]
    decoded = [np.frombuffer(base64.b64decode(r), dtype="<f4") if isinstance(r, str) else r for r in rows]
    return np.asarray(decoded, dtype=np.float32)


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ReplayServer, ReplayServer]]:
    with replay_server(OPENAI_EMBED) as oa, replay_server(OLLAMA_EMBED) as ol:
        yield oa, ol


@pytest.fixture(scope="module")
def gateway(upstreams: tuple[ReplayServer, ReplayServer]) -> Iterator[RunningServer]:
    oa, ol = upstreams
    dead = f"http://127.0.0.1:{free_port()}"
    config = config_from_yaml(
        f"""\
        models:
          - {{name: "oa-*", backend: openai, base_url: "{oa.url}/v1"}}
          - {{name: "ol-*", backend: ollama, base_url: "{ol.url}"}}
          - name: failover
            backend: openai
            endpoints: ["{dead}/v1", "{oa.url}/v1"]
            model: oa-float
        """
    )
    with serve(config) as server:
        yield server


def last_body(server: ReplayServer, model: str) -> dict:
    return server.requests_for(model)[-1].json()


def test_openai_client_to_openai_upstream_float(gateway: RunningServer, upstreams) -> None:
    oa, _ = upstreams
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    reply = client.embeddings.create(model="oa-float", input=["a", "b"], encoding_format="float")
    got = np.asarray([d.embedding for d in reply.data], dtype=np.float32)
    assert np.allclose(got, recorded("openai/embeddings_float.json"), atol=1e-6)
    assert reply.usage.prompt_tokens == 8
    sent = oa.requests_for("oa-float")[-1]
    assert sent.path == "/v1/embeddings"
    assert sent.json() == {"model": "oa-float", "input": ["a", "b"], "encoding_format": "base64"}


def test_base64_upstream_reply_is_decoded_in_index_order(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    reply = client.embeddings.create(model="oa-b64", input=["a", "b"])  # the client asks for base64 itself
    got = np.asarray([d.embedding for d in reply.data], dtype=np.float32)
    assert np.allclose(got, recorded("openai/embeddings_base64.json"), atol=1e-6)
    raw = client.embeddings.create(model="oa-b64", input=["a", "b"], encoding_format="base64")
    decoded = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    assert np.array_equal(decoded, got)


def test_ollama_client_to_vllm_upstream(gateway: RunningServer, upstreams) -> None:
    oa, _ = upstreams
    reply = ollama.Client(host=gateway.url).embed(model="oa-vllm", input=["a", "b"], dimensions=4)
    got = np.asarray(reply.embeddings)
    assert got.shape == (2, 4)  # vLLM sent 8; the gateway cut them and renormalised
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    want = recorded("openai/vllm_embeddings.json")[:, :4]
    assert np.allclose(got, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)
    assert last_body(oa, "oa-vllm") == {"model": "oa-vllm", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 4}


def test_ollama_client_to_ollama_upstream(gateway: RunningServer, upstreams) -> None:
    _, ol = upstreams
    reply = ollama.Client(host=gateway.url).embed(model="ol-embed", input=["a", "b"], truncate=False, keep_alive="1m")
    assert np.allclose(np.asarray(reply.embeddings), recorded("ollama/embed_two.json"), atol=1e-6)
    assert reply.prompt_eval_count == 8
    sent = ol.requests_for("ol-embed")[-1]
    assert sent.path == "/api/embed"
    assert sent.json() == {"model": "ol-embed", "input": ["a", "b"], "truncate": False, "keep_alive": 60.0}


def test_openai_client_to_ollama_upstream_refuses_rather_than_cuts(gateway: RunningServer, upstreams) -> None:
    _, ol = upstreams
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    reply = client.embeddings.create(model="ol-embed", input=["a", "b"], dimensions=8)
    assert len(reply.data) == 2 and len(reply.data[0].embedding) == 8
    # OpenAI's dialect refuses over-long inputs, so Ollama is told not to truncate.
    assert last_body(ol, "ol-embed") == {"model": "ol-embed", "input": ["a", "b"], "truncate": False, "dimensions": 8}


def test_token_arrays_cannot_reach_an_ollama_upstream(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    with pytest.raises(openai.BadRequestError, match="token arrays cannot be sent to an Ollama upstream"):
        client.embeddings.create(model="ol-embed", input=[[1, 2, 3]])


def test_token_arrays_pass_to_an_openai_upstream(gateway: RunningServer, upstreams) -> None:
    oa, _ = upstreams
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k")
    client.embeddings.create(model="oa-one", input=[[5, 6, 7]])
    assert last_body(oa, "oa-one")["input"] == [[5, 6, 7]]


def test_legacy_endpoint_uses_ollamas_legacy_endpoint_and_keeps_the_raw_vector(gateway: RunningServer, upstreams) -> None:
    _, ol = upstreams
    reply = ollama.Client(host=gateway.url).embeddings(model="ol-legacy", prompt="hello")
    raw = json.loads((TRANSCRIPTS / "ollama/embeddings_legacy.json").read_text())["embedding"]
    assert np.allclose(reply.embedding, raw, atol=1e-6)
    assert np.linalg.norm(reply.embedding) > 3  # not normalised, as Ollama's own
    sent = ol.requests_for("ol-legacy")[-1]
    assert sent.path == "/api/embeddings" and sent.json() == {"model": "ol-legacy", "prompt": "hello"}


def test_upstream_400_reaches_each_dialect(gateway: RunningServer) -> None:
    answer = httpx.post(gateway.url + "/api/embed", json={"model": "oa-long", "input": "x"})
    assert answer.status_code == 400 and "maximum context length is 8192" in answer.json()["error"]
    answer = httpx.post(gateway.url + "/v1/embeddings", json={"model": "ol-long", "input": "x"})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "the input length exceeds the context length"


def test_a_miscounted_reply_is_a_502(gateway: RunningServer) -> None:
    answer = httpx.post(gateway.url + "/v1/embeddings", json={"model": "oa-one", "input": ["a", "b"]})
    assert answer.status_code == 502 and "sent 1 embeddings for 2 inputs" in answer.json()["error"]["message"]


def test_failover_skips_a_dead_endpoint_and_metrics_count_it(gateway: RunningServer) -> None:
    reply = ollama.Client(host=gateway.url).embed(model="failover", input=["a", "b"])
    assert len(reply.embeddings) == 2
    metrics = httpx.get(gateway.url + "/metrics").text
    assert 'dragoman_embedding_requests_total{model="failover",status="200"}' in metrics
    assert 'dragoman_embedding_inputs_total{model="failover"} 2.0' in metrics


def test_an_upstream_5xx_is_reported_after_the_retry(gateway: RunningServer) -> None:
    answer = httpx.post(gateway.url + "/api/embed", json={"model": "oa-503", "input": "x"})
    assert answer.status_code == 503
