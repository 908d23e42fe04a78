"""The OpenAI Responses dialect (``POST /v1/responses``, typed SSE events), client side
and upstream side. Errors before a stream begins are OpenAI's ``{"error": {…}}`` bodies
(:func:`adapters.openai.render_error`)."""

from __future__ import annotations

from dragoman.adapters.responses.convert import builtin_tools, image_parts, input_items, remote_image_urls, to_canonical
from dragoman.adapters.responses.items import decode_items, output_items, stored_item
from dragoman.adapters.responses.stream import (
    ResponseMeta,
    StreamEncoder,
    build_response,
    encode_response,
    error_code,
    meta_for,
    response_object,
)
from dragoman.adapters.responses.wire import Response, ResponsesRequest

__all__ = [
    "Response",
    "ResponseMeta",
    "ResponsesRequest",
    "StreamEncoder",
    "build_response",
    "builtin_tools",
    "decode_items",
    "encode_response",
    "image_parts",
    "error_code",
    "input_items",
    "meta_for",
    "output_items",
    "remote_image_urls",
    "response_object",
    "stored_item",
    "to_canonical",
]
