"""Embedding translation as table tests: each dialect's request to the canonical one,
the vectors' shaping, and the wire replies (float, base64) in both directions."""

from __future__ import annotations

import base64

import msgspec
import numpy as np
import pytest

from dragoman.adapters.canonical import EmbedRequest, EmbedResult
from dragoman.adapters.embeddings import shape_vectors
from dragoman.adapters.errors import BackendError, RequestError
from dragoman.adapters.ollama import embed as ol
from dragoman.adapters.openai import embed as oa

V = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], dtype=np.float32)


@pytest.mark.parametrize(
    ("dimensions", "normalize", "want"),
    [
        (None, False, [[3, 4, 0], [0, 0, 2]]),
        (None, True, [[0.6, 0.8, 0], [0, 0, 1]]),
        (1, True, [[1], [0]]),  # a zero vector stays zero rather than NaN
        (2, False, [[3, 4], [0, 0]]),
    ],
)
def test_shape_vectors(dimensions: int | None, normalize: bool, want: list[list[float]]) -> None:
    assert np.allclose(shape_vectors(V, dimensions=dimensions, normalize=normalize), want)


def test_shape_vectors_refuses_more_dimensions_and_nan() -> None:
    with pytest.raises(RequestError, match="dimensions: 4 is more than the model's 3"):
        shape_vectors(V, dimensions=4, normalize=True)
    with pytest.raises(BackendError, match="NaN"):
        shape_vectors(np.array([[np.nan, 1.0]]), dimensions=None, normalize=True)


def decode(type_: type, body: dict) -> object:
    return msgspec.convert(body, type_)


@pytest.mark.parametrize(
    ("body", "inputs", "truncate"),
    [
        ({"model": "m", "input": "hi"}, ["hi"], True),
        ({"model": "m", "input": ["a", "b"], "truncate": False}, ["a", "b"], False),
        ({"model": "m", "input": ""}, [], True),
        ({"model": "m"}, [], True),
    ],
)
def test_ollama_embed_to_canonical(body: dict, inputs: list[str], truncate: bool) -> None:
    request = ol.embed_to_canonical(decode(ol.EmbedWireRequest, body))  # type: ignore[arg-type]
    assert (request.inputs, request.truncate, request.normalize) == (inputs, truncate, True)


def test_ollama_options_and_keep_alive() -> None:
    request = ol.embed_to_canonical(
        decode(ol.EmbedWireRequest, {"model": "m", "input": "x", "keep_alive": "5m", "options": {"num_ctx": 64}})  # type: ignore[arg-type]
    )
    assert (request.keep_alive, request.num_ctx) == (300.0, 64)
    with pytest.raises(RequestError, match="keep_alive"):
        ol.embed_to_canonical(decode(ol.EmbedWireRequest, {"model": "m", "input": "x", "keep_alive": "10"}))  # type: ignore[arg-type]


def test_legacy_is_not_normalised() -> None:
    request = ol.legacy_to_canonical(decode(ol.LegacyEmbeddingRequest, {"model": "m", "prompt": "p"}))  # type: ignore[arg-type]
    assert (request.inputs, request.normalize) == (["p"], False)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("hi", ["hi"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
        (["a", [4, 5]], ["a", [4, 5]]),
    ],
)
def test_openai_inputs(value: object, want: list[object]) -> None:
    assert oa.parse_input(value) == want  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "param"),
    [("", "input"), ([], "input"), (["a", ""], "input[1]"), ([[1], []], "input[1]"), ([[1, -2]], "input[0][1]"),
     ([True], "input[0]"), ([{"x": 1}], "input[0]"), ([1.5], "input[0]")],
)  # fmt: skip
def test_openai_bad_inputs_name_the_field(value: object, param: str) -> None:
    with pytest.raises(RequestError) as caught:
        oa.parse_input(value)  # type: ignore[arg-type]
    assert caught.value.param == param


def test_openai_render_float_and_base64_agree() -> None:
    result = EmbedResult(vectors=np.array([[0.1, -0.2], [0.3, 0.4]], dtype=np.float32), prompt_tokens=5)
    floats = msgspec.json.decode(oa.render_embeddings(result, "m", "float"))
    b64 = msgspec.json.decode(oa.render_embeddings(result, "m", "base64"))
    assert floats["usage"] == {"prompt_tokens": 5, "total_tokens": 5} and floats["object"] == "list"
    assert [d["index"] for d in floats["data"]] == [0, 1] and floats["data"][0]["object"] == "embedding"
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4").tolist() for d in b64["data"]]
    assert np.array_equal(np.asarray(decoded, dtype=np.float32), np.asarray([d["embedding"] for d in floats["data"]], dtype=np.float32))


def test_ollama_render_writes_zero_counts() -> None:
    body = msgspec.json.decode(ol.render_embed(EmbedResult(vectors=np.zeros((0, 0), dtype=np.float32)), "m"))
    assert body == {"model": "m", "embeddings": [], "total_duration": 0, "load_duration": 0, "prompt_eval_count": 0}


@pytest.mark.parametrize(
    ("request_", "path", "body"),
    [
        (EmbedRequest(model="x", inputs=["a"], truncate=False, dimensions=8), "/api/embed",
         {"model": "up", "input": ["a"], "truncate": False, "dimensions": 8}),
        (EmbedRequest(model="x", inputs=["a", "b"], num_ctx=32, keep_alive=-1.0), "/api/embed",
         {"model": "up", "input": ["a", "b"], "keep_alive": -1.0, "options": {"num_ctx": 32}}),
        (EmbedRequest(model="x", inputs=["a"], normalize=False), "/api/embeddings", {"model": "up", "prompt": "a"}),
    ],
)  # fmt: skip
def test_ollama_upstream_requests(request_: EmbedRequest, path: str, body: dict) -> None:
    got_path, got_body = ol.embed_to_upstream(request_, "up")
    assert (got_path, msgspec.json.decode(got_body)) == (path, body)


def test_openai_upstream_request_and_reply() -> None:
    body = msgspec.json.decode(oa.embeddings_to_upstream(EmbedRequest(model="x", inputs=[[1, 2]], dimensions=3), "up"))
    assert body == {"model": "up", "input": [[1, 2]], "encoding_format": "base64", "dimensions": 3}
    b = base64.b64encode(np.array([1, 2], dtype="<f4").tobytes()).decode()
    reply = msgspec.json.encode({"data": [{"index": 1, "embedding": b}, {"index": 0, "embedding": [3, 4]}],
                                 "usage": {"prompt_tokens": 7}})  # fmt: skip
    result = oa.parse_upstream_embeddings(reply, 2)
    assert result.vectors.tolist() == [[3, 4], [1, 2]] and result.prompt_tokens == 7
    with pytest.raises(ValueError, match="different lengths"):
        oa.parse_upstream_embeddings(msgspec.json.encode({"data": [{"embedding": [1]}, {"index": 1, "embedding": [1, 2]}]}), 2)
    with pytest.raises(ValueError, match="could not be read"):
        oa.parse_upstream_embeddings(b"<html>", 1)
