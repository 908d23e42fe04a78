"""The Anthropic Messages dialect (``POST /v1/messages``, named SSE events), client side
and upstream side."""

from __future__ import annotations

from dragoman.adapters.anthropic.convert import count_request, image_blocks, remote_image_urls, think_level_for_budget, to_canonical
from dragoman.adapters.anthropic.stream import (
    StreamEncoder,
    error_message,
    error_type,
    render_error,
    render_response,
    status_for,
    stop_reason,
)
from dragoman.adapters.anthropic.wire import CountTokensRequest, MessagesRequest

__all__ = [
    "CountTokensRequest",
    "MessagesRequest",
    "StreamEncoder",
    "count_request",
    "image_blocks",
    "error_message",
    "error_type",
    "remote_image_urls",
    "render_error",
    "render_response",
    "status_for",
    "stop_reason",
    "think_level_for_budget",
    "to_canonical",
]
