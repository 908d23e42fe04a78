"""The Anthropic Messages dialect (``POST /v1/messages``, named SSE events), client side
and upstream side."""

from __future__ import annotations

from dragoman.adapters.dialect import Dialect, call_named
from dragoman.adapters.anthropic.convert import count_request, image_blocks, remote_image_urls, think_level_for_budget, to_canonical
from dragoman.adapters.anthropic.stream import (
    StreamEncoder,
    error_message,
    error_type,
    render_error,
    render_response,
    reply_for,
    status_for,
    stop_reason,
)
from dragoman.adapters.anthropic.models import MODEL_LISTING
from dragoman.adapters.anthropic.wire import CountTokensRequest, MessagesRequest

__all__ = [
    "DIALECT",
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
    "reply_for",
    "status_for",
    "stop_reason",
    "think_level_for_budget",
    "to_canonical",
]

def _message_field(index: int, role: str) -> str:
    """A ``system`` becomes canonical message 0, tool results messages of their own:
    only the system prompt has a place of its own to name."""
    return "system" if role == "system" else f"messages ({role} message)"


def _call_field(index: int, position: int, call_id: str | None, name: str) -> str:
    return f"messages (tool_use block {call_named(call_id, name)}).input"


DIALECT = Dialect(
    name="anthropic",
    path_prefixes=("/v1/messages",),
    render_error=render_error,
    field_names={
        "stop": "stop_sequences", "response_format": "output_config.format", "schema": "output_config.format.schema",
        "tool_schema": "tools[{}].input_schema", "conversation": "messages",
    },
    error_status=status_for,
    message_field=_message_field,
    call_field=_call_field,
    claim_header="anthropic-version",
    key_hint="'x-api-key: <key>' or 'Authorization: Bearer <key>'",
    model_listing=MODEL_LISTING,
)  # fmt: skip
