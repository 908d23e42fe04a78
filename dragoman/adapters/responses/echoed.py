"""Bounds on what a Responses request carries back in the response object (and so in
the response store) without it ever reaching the model: ``metadata``, built-in tools,
the identifier strings. What reaches the model is bounded by its context; these are
not, and one request could otherwise store tens of megabytes and push every other
client's stored responses out of ``server.responses.max_bytes``."""

from __future__ import annotations

import msgspec

from dragoman.adapters.errors import RequestError
from dragoman.adapters.responses import wire

# OpenAI's documented bounds on metadata.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
# Tools that are not offered to the model (web_search, a namespace, …), echoed as sent:
# Codex's default pair is about 11 KB.
MAX_BUILTIN_TOOLS_BYTES = 256 * 1024
# user, prompt_cache_key, safety_identifier: identifiers, echoed.
MAX_IDENTIFIER = 512

_encoder = msgspec.json.Encoder()


def check_echoed(request: wire.ResponsesRequest) -> None:
    check_metadata(request.metadata)
    builtin = [tool for tool in request.tools or () if tool.get("type") != "function"]
    if builtin and (size := len(_encoder.encode(builtin))) > MAX_BUILTIN_TOOLS_BYTES:
        raise RequestError(
            f"tools: the tools that are not function tools take {size} bytes; the limit is {MAX_BUILTIN_TOOLS_BYTES} "
            "(they are not offered to the model, only echoed back)",
            param="tools",
        )
    for field in ("user", "prompt_cache_key", "safety_identifier"):
        value = getattr(request, field)
        if value is not None and len(value) > MAX_IDENTIFIER:
            raise RequestError(f"{field}: {len(value)} characters; the limit is {MAX_IDENTIFIER}", param=field)


def check_metadata(metadata: dict[str, str] | None) -> None:
    if not metadata:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise RequestError(
            f"metadata: {len(metadata)} pairs; the limit is {MAX_METADATA_PAIRS}", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:
            raise RequestError(f"metadata: a key of {len(key)} characters; the limit is {MAX_METADATA_KEY}", param="metadata")
        if len(value) > MAX_METADATA_VALUE:
            raise RequestError(
                f"metadata.{key}: {len(value)} characters; the limit is {MAX_METADATA_VALUE}", param=f"metadata.{key}"
            )
