"""The OpenAI Chat Completions dialect: client requests in, replies out, and the same
dialect spoken to OpenAI-compatible upstreams."""

from __future__ import annotations

from dragoman.adapters.dialect import Dialect
from dragoman.adapters.openai.convert import to_canonical
from dragoman.adapters.openai.models import MODEL_LISTING
from dragoman.adapters.openai.stream import StreamEncoder, render_error, render_response, reply_for
from dragoman.adapters.openai.upstream_reply import UpstreamStreamDecoder, parse_upstream_error, parse_upstream_response
from dragoman.adapters.openai.upstream_request import completion_to_upstream, to_upstream
from dragoman.adapters.openai.wire import (
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    ContentPart,
    OpenAIToolCall,
    OpenAIToolDefinition,
)

__all__ = [
    "DIALECT",
    "ChatCompletionMessage",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatCompletionStreamResponse",
    "ContentPart",
    "OpenAIToolCall",
    "OpenAIToolDefinition",
    "StreamEncoder",
    "UpstreamStreamDecoder",
    "completion_to_upstream",
    "parse_upstream_error",
    "parse_upstream_response",
    "render_error",
    "render_response",
    "reply_for",
    "to_canonical",
    "to_upstream",
]

DIALECT = Dialect(
    name="openai",
    path_prefixes=("/v1/",),
    render_error=render_error,
    field_names={"schema": "response_format.json_schema.schema", "tool_schema": "tools[{}].function.parameters", "conversation": "messages"},
    shares_paths=True,
    model_listing=MODEL_LISTING,
)
