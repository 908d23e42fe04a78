"""OpenAI's ``/v1/embeddings``, both directions.

``input`` is a string, a list of strings, a list of token ids, or a list of such lists;
token ids are the serving model's own and are used as given. ``encoding_format``
``base64`` is the little-endian float32 bytes of each vector, which is what the
``openai`` client asks for by default and decodes with ``np.frombuffer(…, "float32")``.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from msgspec import Meta

from dragoman.adapters.canonical import EmbedInput, EmbedRequest, EmbedResult
from dragoman.adapters.errors import RequestError
from dragoman.adapters.upstream_json import Unreadable, read_json

TokenId = Annotated[int, Meta(ge=0, le=2**31 - 1)]


class EmbeddingsRequest(msgspec.Struct, omit_defaults=True):
    model: str
    input: str | list[Any]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Meta(ge=1, le=65536)] | None = None
    user: str | None = None


class EmbeddingData(msgspec.Struct):
    index: int
    embedding: Any  # list of floats, or a base64 string
    object: str = "embedding"


class EmbeddingsUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(msgspec.Struct):
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingsUsage
    object: str = "list"


class UpstreamEmbeddingData(msgspec.Struct):
    embedding: list[float] | str
    index: int = 0


class UpstreamUsage(msgspec.Struct):
    prompt_tokens: int = 0


class UpstreamEmbeddingsReply(msgspec.Struct):
    data: list[UpstreamEmbeddingData] = msgspec.field(default_factory=list)
    usage: UpstreamUsage | None = None


_encoder = msgspec.json.Encoder()
_upstream_decoder = msgspec.json.Decoder(UpstreamEmbeddingsReply)


def parse_input(value: str | list[Any]) -> list[EmbedInput]:
    """The inputs, each a string or a list of token ids; errors name ``input[i]``."""
    if isinstance(value, str):
        if not value:
            raise RequestError("input: must not be an empty string", param="input")
        return [value]
    if not value:
        raise RequestError("input: must not be an empty list", param="input")
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return [_tokens(value, "input")]
    inputs: list[EmbedInput] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise RequestError(f"input[{i}]: must not be an empty string", param=f"input[{i}]")
            inputs.append(item)
        elif isinstance(item, list):
            inputs.append(_tokens(item, f"input[{i}]"))
        else:
            raise RequestError(
                f"input[{i}]: expected a string or a list of token ids, got {type(item).__name__}",
                param=f"input[{i}]",
            )
    return inputs


def _tokens(items: list[Any], where: str) -> list[int]:
    if not items:
        raise RequestError(f"{where}: must not be an empty list of tokens", param=where)
    for j, token in enumerate(items):
        if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < 2**31:
            raise RequestError(f"{where}[{j}]: token ids are integers from 0 to 2^31-1", param=f"{where}[{j}]")
    return list(items)


def embeddings_to_canonical(data: EmbeddingsRequest) -> EmbedRequest:
    """OpenAI refuses inputs longer than the model's context rather than cutting them,
    and promises unit vectors."""
    return EmbedRequest(
        model=data.model, inputs=parse_input(data.input), truncate=False, normalize=True, dimensions=data.dimensions
    )


def render_embeddings(result: EmbedResult, model: str, encoding_format: str) -> bytes:
    vectors: np.ndarray = result.vectors
    if encoding_format == "base64":
        little = vectors.astype("<f4", copy=False)
        rows: list[Any] = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        rows = vectors.tolist()
    data = [EmbeddingData(index=i, embedding=row) for i, row in enumerate(rows)]
    usage = EmbeddingsUsage(prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens)
    return _encoder.encode(EmbeddingsResponse(data=data, model=model, usage=usage))


# -- upstream side -------------------------------------------------------------------------


def embeddings_to_upstream(request: EmbedRequest, model: str) -> bytes:
    """The body for an OpenAI-compatible server. base64 halves the bytes and skips a
    float parse per component; servers that ignore it send floats, read as well."""
    body: dict[str, Any] = {"model": model, "input": list(request.inputs), "encoding_format": "base64"}
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    return _encoder.encode(body)


def parse_upstream_embeddings(body: bytes, expected: int) -> EmbedResult:
    """An upstream's ``/embeddings`` reply in input order; ``ValueError`` when unreadable."""
    try:
        reply = read_json(_upstream_decoder.decode, body)
    except Unreadable as exc:
        raise ValueError(f"upstream sent an embeddings reply {exc}") from None
    if len(reply.data) != expected:
        raise ValueError(f"upstream sent {len(reply.data)} embeddings for {expected} inputs")
    ordered = sorted(reply.data, key=lambda d: d.index)
    rows = [_decode_row(d.embedding) for d in ordered]
    if rows and len({len(row) for row in rows}) != 1:
        raise ValueError("upstream sent embeddings of different lengths")
    vectors = np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
    tokens = reply.usage.prompt_tokens if reply.usage is not None else 0
    return EmbedResult(vectors=vectors, prompt_tokens=tokens)


def _decode_row(value: list[float] | str) -> np.ndarray:
    if isinstance(value, str):
        raw = base64.b64decode(value, validate=True)
        if len(raw) % 4:
            raise ValueError("upstream sent a base64 embedding that is not whole float32 values")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    return np.asarray(value, dtype=np.float32)


__all__ = [
    "EmbeddingsRequest",
    "EmbeddingsResponse",
    "embeddings_to_canonical",
    "embeddings_to_upstream",
    "parse_input",
    "parse_upstream_embeddings",
    "render_embeddings",
]
