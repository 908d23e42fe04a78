"""Anthropic Messages on the wire (``anthropic-version: 2023-06-01``), spelled as the API
spells it.

Three groups: what clients send (decoded by Litestar; unknown fields are tolerated and
ignored; ``context_management`` edits are applied by :mod:`.context_edits`), what we answer
(one ``type`` tag per block and per stream event, as the SDKs dispatch on it), and what
an Anthropic-speaking upstream answers (every field optional, read leniently).

A request content block is one Struct whose ``type`` stays a plain string, so that a
block we do not take (``document``, ``search_result``, …) is refused by name with its
path, instead of failing as an anonymous union mismatch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

UnitInterval = Annotated[float, Meta(ge=0.0, le=1.0)]
PositiveInt = Annotated[int, Meta(ge=1, le=2**63 - 1)]
NonNegativeInt = Annotated[int, Meta(ge=0, le=2**63 - 1)]

# -- requests from clients ---------------------------------------------------------------


class ImageSource(msgspec.Struct):
    type: str  # base64 | url (| file, refused)
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class ContentBlock(msgspec.Struct):
    type: str
    text: str | None = None
    # image
    source: ImageSource | None = None
    # tool_use
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    # tool_result
    tool_use_id: str | None = None
    content: str | list[ContentBlock] | None = None
    is_error: bool | None = None
    # thinking / redacted_thinking
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


class MessageParam(msgspec.Struct):
    # "system" mid-conversation is what Claude Code 2.1 sends (a beta of the API).
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class ToolParam(msgspec.Struct):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    # None or "custom" for a client tool; Anthropic's own tools carry a dated type
    # (``web_search_20250305``, ``bash_20250124``, ``tool_search_tool_regex_20251119``)
    # and no schema.
    type: str | None = None
    # Offered only once a tool-search tool finds it (Anthropic's tool search).
    defer_loading: bool | None = None


class ToolChoiceParam(msgspec.Struct):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingParam(msgspec.Struct):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class OutputFormat(msgspec.Struct):
    type: Literal["json_schema"]
    schema: dict[str, Any] | None = None


class OutputConfig(msgspec.Struct):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class EditCount(msgspec.Struct):
    """A trigger, a keep or a clear_at_least: ``{"type": "input_tokens", "value": N}``,
    ``tool_uses``, ``thinking_turns``."""

    type: str
    value: NonNegativeInt


class ContextEdit(msgspec.Struct):
    """One of ``context_management.edits`` (``clear_tool_uses_20250919``,
    ``clear_thinking_20251015``); the type stays a string so others are refused by name."""

    type: str
    trigger: EditCount | None = None
    keep: EditCount | Literal["all"] | None = None
    clear_at_least: EditCount | None = None
    exclude_tools: list[str] | None = None
    clear_tool_inputs: bool | None = None


class ContextManagement(msgspec.Struct):
    edits: list[ContextEdit] | None = None


class MessagesRequest(msgspec.Struct, kw_only=True):
    model: str
    max_tokens: PositiveInt
    messages: list[MessageParam]
    system: str | list[ContentBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: UnitInterval | None = None
    top_p: UnitInterval | None = None
    top_k: NonNegativeInt | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    output_config: OutputConfig | None = None
    metadata: dict[str, Any] | None = None
    mcp_servers: list[Any] | None = None
    container: Any = None
    # Automatic prompt caching: local prefix reuse is automatic, so accepted as a no-op.
    cache_control: dict[str, Any] | None = None
    context_management: ContextManagement | None = None


class CountTokensRequest(msgspec.Struct, kw_only=True):
    """``/v1/messages/count_tokens``: a Messages request without the sampling fields."""

    model: str
    messages: list[MessageParam]
    system: str | list[ContentBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    output_config: OutputConfig | None = None
    mcp_servers: list[Any] | None = None


# -- what we answer ----------------------------------------------------------------------


class TextBlock(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ThinkingBlock(msgspec.Struct, tag="thinking", tag_field="type"):
    thinking: str
    signature: str


class ToolUseBlock(msgspec.Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


ResponseBlock = TextBlock | ThinkingBlock | ToolUseBlock


class Usage(msgspec.Struct):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class Message(msgspec.Struct, kw_only=True):
    """A whole reply; in ``message_start`` the same object with empty content."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ResponseBlock]
    stop_reason: str | None
    stop_sequence: str | None
    usage: Usage


class MessageStart(msgspec.Struct, tag="message_start", tag_field="type"):
    message: Message


class ContentBlockStart(msgspec.Struct, tag="content_block_start", tag_field="type"):
    index: int
    content_block: ResponseBlock


class TextDelta(msgspec.Struct, tag="text_delta", tag_field="type"):
    text: str


class ThinkingDeltaBody(msgspec.Struct, tag="thinking_delta", tag_field="type"):
    thinking: str


class SignatureDelta(msgspec.Struct, tag="signature_delta", tag_field="type"):
    signature: str


class InputJSONDelta(msgspec.Struct, tag="input_json_delta", tag_field="type"):
    partial_json: str


BlockDelta = TextDelta | ThinkingDeltaBody | SignatureDelta | InputJSONDelta


class ContentBlockDelta(msgspec.Struct, tag="content_block_delta", tag_field="type"):
    index: int
    delta: BlockDelta


class ContentBlockStop(msgspec.Struct, tag="content_block_stop", tag_field="type"):
    index: int


class MessageDeltaBody(msgspec.Struct):
    stop_reason: str | None
    stop_sequence: str | None


class DeltaUsage(msgspec.Struct):
    """Cumulative counts, as the SDK's ``MessageDeltaUsage``; here the only place the
    input counts are known (``message_start`` goes out before the prompt is read)."""

    output_tokens: int
    input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class MessageDelta(msgspec.Struct, tag="message_delta", tag_field="type"):
    delta: MessageDeltaBody
    usage: DeltaUsage


class MessageStop(msgspec.Struct, tag="message_stop", tag_field="type"):
    pass


class Ping(msgspec.Struct, tag="ping", tag_field="type"):
    pass


class ErrorDetail(msgspec.Struct):
    type: str
    message: str


class ErrorResponse(msgspec.Struct, tag="error", tag_field="type"):
    error: ErrorDetail


StreamEvent = (
    MessageStart | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop | Ping
    | ErrorResponse
)


class ModelInfo(msgspec.Struct, tag="model", tag_field="type"):
    id: str
    display_name: str
    created_at: str  # RFC 3339
    max_input_tokens: int | None = None


class ModelPage(msgspec.Struct):
    data: list[ModelInfo]
    has_more: bool
    first_id: str | None
    last_id: str | None


class TokenCount(msgspec.Struct):
    input_tokens: int


# -- what Anthropic-speaking upstreams answer -----------------------------------------------


class UpstreamBlock(msgspec.Struct):
    type: str = ""
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None


class UpstreamDelta(msgspec.Struct):
    """A block delta or the ``message_delta`` body."""

    type: str = ""
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class UpstreamUsage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class UpstreamErrorDetail(msgspec.Struct):
    type: str | None = None
    message: str | None = None


class UpstreamMessage(msgspec.Struct):
    content: list[UpstreamBlock] | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: UpstreamUsage | None = None


class UpstreamEvent(msgspec.Struct):
    """One SSE event's data, a whole reply, or an error body: all share ``type``."""

    type: str = ""
    message: UpstreamMessage | None = None
    index: int | None = None
    content_block: UpstreamBlock | None = None
    delta: UpstreamDelta | None = None
    usage: UpstreamUsage | None = None
    error: UpstreamErrorDetail | None = None
    # a whole message (type "message") has these at the top level
    content: list[UpstreamBlock] | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None
    input_tokens: int | None = None  # count_tokens' answer
