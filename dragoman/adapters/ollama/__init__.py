"""Ollama's native chat dialect (``POST /api/chat``, NDJSON), client side and upstream side."""

from __future__ import annotations

from dragoman.adapters.dialect import Dialect
from dragoman.adapters.ollama.convert import (
    parse_format,
    parse_keep_alive,
    parse_think,
    parse_upstream_error,
    to_canonical,
    to_upstream,
)
from dragoman.adapters.ollama.stream import (
    StreamEncoder,
    created_at,
    render_error,
    render_load_response,
    render_response,
    reply_for,
)
from dragoman.adapters.ollama.upstream_reply import UpstreamStreamDecoder, parse_upstream_response
from dragoman.adapters.ollama.wire import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ErrorResponse,
    ModelOptions,
    ToolCall,
    ToolDefinition,
)

__all__ = [
    "DIALECT",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "ErrorResponse",
    "ModelOptions",
    "StreamEncoder",
    "ToolCall",
    "ToolDefinition",
    "UpstreamStreamDecoder",
    "created_at",
    "parse_format",
    "parse_keep_alive",
    "parse_think",
    "parse_upstream_error",
    "parse_upstream_response",
    "render_error",
    "render_load_response",
    "render_response",
    "reply_for",
    "to_canonical",
    "to_upstream",
]

DIALECT = Dialect(
    name="ollama",
    path_prefixes=("",),  # every path the other dialects do not claim
    render_error=render_error,
    field_names={
        "stop": "options.stop", "response_format": "format", "schema": "format",
        "tool_schema": "tools[{}].function.parameters", "conversation": "messages",
    },
)  # fmt: skip
