"""The OpenAI Responses dialect (``POST /v1/responses``, typed SSE events), client side
and upstream side. Errors before a stream begins are OpenAI's ``{"error": {…}}`` bodies
(:func:`adapters.openai.render_error`)."""

from __future__ import annotations

from dragoman.adapters.dialect import Dialect, call_named
from dragoman.adapters.openai import render_error
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
from dragoman.adapters.responses.reply import ResponseReply
from dragoman.adapters.responses.wire import Response, ResponsesRequest

__all__ = [
    "DIALECT",
    "Response",
    "ResponseMeta",
    "ResponseReply",
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

def _message_field(index: int, role: str) -> str:
    """``instructions``, tool calls and their results become canonical messages of their
    own: name the collection and the role."""
    if role == "system" and index == 0:
        return "instructions (or the system message that opens input)"
    return f"input ({role} message)"


def _call_field(index: int, position: int, call_id: str | None, name: str) -> str:
    return f"input (function_call {call_named(call_id, name)}).arguments"


DIALECT = Dialect(
    name="responses",
    path_prefixes=("/v1/responses",),
    render_error=render_error,  # Responses errors are OpenAI's
    field_names={
        "messages": "input", "response_format": "text.format", "schema": "text.format.schema",
        "tool_schema": "tools[{}].parameters", "conversation": "input",
    },
    message_field=_message_field,
    call_field=_call_field,
)  # fmt: skip
