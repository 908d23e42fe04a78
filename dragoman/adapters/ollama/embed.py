"""Ollama's embedding endpoints, both directions: ``/api/embed`` (``EmbedRequest``,
unit vectors, a batch) and the legacy ``/api/embeddings`` (one ``prompt``, the model's
own vector). Shapes as ``api/types.go`` spells them."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Meta

from dragoman.adapters.canonical import EmbedRequest, EmbedResult, Timings
from dragoman.adapters.errors import RequestError
from dragoman.adapters.ollama.convert import parse_keep_alive
from dragoman.adapters.ollama.wire import Counts, GoRequest, ModelOptions
from dragoman.adapters.upstream_json import Unreadable, read_json

Dimensions = Annotated[int, Meta(ge=1, le=65536)]


class EmbedWireRequest(GoRequest, omit_defaults=True):
    """``input`` is a string or a list of strings; missing or empty means "load"."""

    model: str
    input: str | list[str] | None = None
    truncate: bool | None = None
    dimensions: Dimensions | None = None
    keep_alive: float | str | None = None
    options: ModelOptions | None = None


class EmbedWireResponse(msgspec.Struct):
    model: str
    embeddings: Any  # a list of lists of floats, written straight from the array
    # Always written, 0 included: clients parse them as required numbers (the Vercel AI
    # SDK's ollama provider fails the whole reply without load_duration).
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class LegacyEmbeddingRequest(GoRequest, omit_defaults=True):
    model: str
    prompt: str | None = ""
    keep_alive: float | str | None = None
    options: ModelOptions | None = None


class LegacyEmbeddingResponse(msgspec.Struct):
    embedding: Any


class UpstreamEmbedReply(Counts):
    """What an Ollama server answers on ``/api/embed`` or ``/api/embeddings``, leniently."""

    embeddings: list[list[float]] | None = None
    embedding: list[float] | None = None


_encoder = msgspec.json.Encoder()
_upstream_decoder = msgspec.json.Decoder(UpstreamEmbedReply)


def _keep_alive(value: float | str | None) -> float | None:
    try:
        return parse_keep_alive(value)
    except ValueError as exc:
        raise RequestError(f"keep_alive: {exc}", param="keep_alive") from None


def _num_ctx(options: ModelOptions | None) -> int | None:
    return int(options.num_ctx) if options is not None and options.num_ctx and options.num_ctx > 0 else None  # an int already (ModelOptions)


def embed_to_canonical(data: EmbedWireRequest) -> EmbedRequest:
    """``/api/embed``. An empty string is no input (Ollama loads the model and answers
    ``[]``); ``truncate`` defaults to true; vectors are unit length."""
    if data.input is None or data.input == "":
        inputs: list[str | list[int]] = []
    elif isinstance(data.input, str):
        inputs = [data.input]
    else:
        inputs = list(data.input)
    return EmbedRequest(
        model=data.model,
        inputs=inputs,
        truncate=data.truncate is not False,
        normalize=True,
        dimensions=data.dimensions,
        num_ctx=_num_ctx(data.options),
        keep_alive=_keep_alive(data.keep_alive),
    )


def legacy_to_canonical(data: LegacyEmbeddingRequest) -> EmbedRequest:
    """``/api/embeddings``: one prompt, the model's own vector (not normalised by the
    gateway), truncated to the context as Ollama's runner does."""
    return EmbedRequest(
        model=data.model,
        inputs=[data.prompt] if data.prompt else [],
        truncate=True,
        normalize=False,
        num_ctx=_num_ctx(data.options),
        keep_alive=_keep_alive(data.keep_alive),
    )


def render_embed(result: EmbedResult, model: str) -> bytes:
    vectors = result.vectors
    return _encoder.encode(
        EmbedWireResponse(
            model=model,
            embeddings=vectors.tolist() if isinstance(vectors, np.ndarray) else [],
            total_duration=result.timings.total_ns,
            load_duration=result.timings.load_ns,
            prompt_eval_count=result.prompt_tokens,
        )
    )


def render_legacy(result: EmbedResult) -> bytes:
    vectors = result.vectors
    embedding = vectors[0].tolist() if isinstance(vectors, np.ndarray) and len(vectors) else []
    return _encoder.encode(LegacyEmbeddingResponse(embedding=embedding))


# -- upstream side -------------------------------------------------------------------------


def embed_to_upstream(request: EmbedRequest, model: str) -> tuple[str, bytes]:
    """(path, body) for an Ollama server. Raw vectors of one text go to the legacy
    endpoint (the only one that returns them); everything else to ``/api/embed``."""
    if any(not isinstance(item, str) for item in request.inputs):
        raise RequestError(
            "input: token arrays cannot be sent to an Ollama upstream (it takes text only)", param="input"
        )
    options = ModelOptions(num_ctx=request.num_ctx) if request.num_ctx else None
    keep_alive = request.keep_alive
    text = request.inputs[0] if len(request.inputs) == 1 else None  # text: token arrays are refused above
    if not request.normalize and isinstance(text, str) and request.dimensions is None:
        body = LegacyEmbeddingRequest(model=model, prompt=text, keep_alive=keep_alive, options=options)
        return "/api/embeddings", _encoder.encode(body)
    wire = EmbedWireRequest(
        model=model,
        input=list(request.inputs),  # type: ignore[arg-type]
        truncate=None if request.truncate else False,
        dimensions=request.dimensions,
        keep_alive=keep_alive,
        options=options,
    )
    return "/api/embed", _encoder.encode(wire)


def parse_upstream_embed(body: bytes, expected: int) -> EmbedResult:
    """An Ollama server's embedding reply; ``expected`` vectors, else ``ValueError``."""
    try:
        reply = read_json(_upstream_decoder.decode, body)
    except Unreadable as exc:
        raise ValueError(f"upstream sent an embedding reply {exc}") from None
    rows = reply.embeddings if reply.embeddings is not None else ([reply.embedding] if reply.embedding else [])
    if len(rows) != expected:
        raise ValueError(f"upstream sent {len(rows)} embeddings for {expected} inputs")
    if rows and len({len(row) for row in rows}) != 1:
        raise ValueError("upstream sent embeddings of different lengths")
    vectors = np.asarray(rows, dtype=np.float32) if rows else np.zeros((0, 0), dtype=np.float32)
    timings = Timings(total_ns=reply.total_duration or 0, load_ns=reply.load_duration or 0)
    return EmbedResult(vectors=vectors, prompt_tokens=reply.prompt_eval_count or 0, timings=timings)


__all__ = [
    "EmbedWireRequest",
    "EmbedWireResponse",
    "LegacyEmbeddingRequest",
    "LegacyEmbeddingResponse",
    "embed_to_canonical",
    "embed_to_upstream",
    "legacy_to_canonical",
    "parse_upstream_embed",
    "render_embed",
    "render_legacy",
]
