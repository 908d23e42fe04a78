"""OpenAI Responses on the wire (``/v1/responses``), spelled as the API spells it.

Requests: an input item is one Struct with a plain-string ``type`` (an item without
``type`` but with ``role`` is a message, as the API allows), so an item or part we do
not take is refused by name with its path. Tools and ``tool_choice`` stay as JSON
objects: built-in tools carry fields of their own, and the reply echoes each tool as
the client sent it.

Replies: the ``response`` object, its output items, and the typed stream events, each
event with a ``sequence_number``. Items are the same Structs in a stream and in the
whole object, so what a stream accumulates equals what a non-streaming call returns.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
UnitInterval = Annotated[float, Meta(ge=0.0, le=1.0)]
PositiveInt = Annotated[int, Meta(ge=1, le=2**63 - 1)]

# -- requests from clients ---------------------------------------------------------------


class ContentPart(msgspec.Struct):
    """``input_text`` / ``output_text`` / ``input_image`` / ``refusal`` / ``reasoning_text``
    / ``summary_text`` (and, refused by name, ``input_file`` and ``input_audio``)."""

    type: str
    text: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None
    refusal: str | None = None


class InputItem(msgspec.Struct):
    type: str | None = None
    id: str | None = None
    # message
    role: str | None = None
    content: str | list[ContentPart] | None = None
    status: str | None = None
    # function_call / function_call_output
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None
    # reasoning
    summary: list[ContentPart] | None = None
    encrypted_content: str | None = None


class TextFormat(msgspec.Struct, omit_defaults=True):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class TextConfig(msgspec.Struct, omit_defaults=True):
    format: TextFormat | None = None
    verbosity: str | None = None


class ReasoningConfig(msgspec.Struct):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class ContextManagement(msgspec.Struct, kw_only=True):
    """One ``context_management`` entry: ``compaction`` past ``compact_threshold`` tokens."""

    type: str
    compact_threshold: int | None = None


class ResponsesRequest(msgspec.Struct, kw_only=True):
    model: str
    input: str | list[InputItem] = msgspec.field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: PositiveInt | None = None
    max_tool_calls: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: UnitInterval | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    stream: bool | None = False  # null: the default (nullable in OpenAI's spec); False after decoding
    store: bool | None = None
    previous_response_id: str | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    client_metadata: dict[str, Any] | None = None
    context_management: list[ContextManagement] | None = None

    def __post_init__(self) -> None:
        if self.stream is None:
            self.stream = False


# -- output items (replies, streams, the store) --------------------------------------------


class OutputText(msgspec.Struct, tag="output_text", tag_field="type"):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class ReasoningText(msgspec.Struct, tag="reasoning_text", tag_field="type"):
    text: str


class SummaryText(msgspec.Struct, tag="summary_text", tag_field="type"):
    text: str


class MessageItem(msgspec.Struct, tag="message", tag_field="type", kw_only=True):
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class FunctionCallItem(msgspec.Struct, tag="function_call", tag_field="type", kw_only=True):
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    name: str
    arguments: str


class ReasoningItem(msgspec.Struct, tag="reasoning", tag_field="type", kw_only=True, omit_defaults=True):
    id: str
    summary: list[SummaryText]  # always present (clients require it), empty: no summaries here
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class CompactionItem(msgspec.Struct, tag="compaction", tag_field="type", kw_only=True, omit_defaults=True):
    """What ``/v1/responses/compact`` (or ``context_management``) makes of earlier items:
    here, a summary the model wrote of them, encoded in ``encrypted_content``."""

    id: str
    encrypted_content: str
    created_by: str | None = None


OutputItem = MessageItem | FunctionCallItem | ReasoningItem | CompactionItem


class InputTokensDetails(msgspec.Struct, frozen=True):
    cached_tokens: int = 0


class OutputTokensDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int = 0


class Usage(msgspec.Struct):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()


class ResponseError(msgspec.Struct):
    code: str
    message: str


class IncompleteDetails(msgspec.Struct):
    reason: str


class ConversationRef(msgspec.Struct):
    """``conversation`` on a response object: the conversation the turn was added to."""

    id: str


class Response(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete", "queued", "cancelled"]
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    model: str
    output: list[OutputItem] = msgspec.field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: ReasoningConfig = msgspec.field(default_factory=ReasoningConfig)
    store: bool = True
    temperature: float = 1.0
    text: TextConfig = msgspec.field(default_factory=lambda: TextConfig(format=TextFormat(type="text")))
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_logprobs: int = 0
    truncation: str = "disabled"
    usage: Usage | None = None
    user: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    background: bool = False
    service_tier: str = "default"
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    conversation: ConversationRef | None = None


class ResponseOutput(msgspec.Struct):
    """Only the output of a stored response, and its status (a background run's is
    ``queued`` or ``in_progress`` until it ends): what the next turn reads back, whatever
    version of the response object the row was written with."""

    output: list[OutputItem] = msgspec.field(default_factory=list)
    status: str | None = None


# -- stream events -----------------------------------------------------------------------


class Created(msgspec.Struct, tag="response.created", tag_field="type"):
    sequence_number: int
    response: Response


class InProgress(msgspec.Struct, tag="response.in_progress", tag_field="type"):
    sequence_number: int
    response: Response


class Completed(msgspec.Struct, tag="response.completed", tag_field="type"):
    sequence_number: int
    response: Response


class Incomplete(msgspec.Struct, tag="response.incomplete", tag_field="type"):
    sequence_number: int
    response: Response


class Failed(msgspec.Struct, tag="response.failed", tag_field="type"):
    sequence_number: int
    response: Response


class OutputItemAdded(msgspec.Struct, tag="response.output_item.added", tag_field="type"):
    sequence_number: int
    output_index: int
    item: OutputItem


class OutputItemDone(msgspec.Struct, tag="response.output_item.done", tag_field="type"):
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartAdded(msgspec.Struct, tag="response.content_part.added", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class ContentPartDone(msgspec.Struct, tag="response.content_part.done", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class OutputTextDelta(msgspec.Struct, tag="response.output_text.delta", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = msgspec.field(default_factory=list)


class OutputTextDone(msgspec.Struct, tag="response.output_text.done", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = msgspec.field(default_factory=list)


class ReasoningTextDelta(msgspec.Struct, tag="response.reasoning_text.delta", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDone(msgspec.Struct, tag="response.reasoning_text.done", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str


class ArgumentsDelta(msgspec.Struct, tag="response.function_call_arguments.delta", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDone(msgspec.Struct, tag="response.function_call_arguments.done", tag_field="type"):
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


StreamEvent = (
    Created | InProgress | Completed | Incomplete | Failed | OutputItemAdded | OutputItemDone | ContentPartAdded
    | ContentPartDone | OutputTextDelta | OutputTextDone | ReasoningTextDelta | ReasoningTextDone | ArgumentsDelta
    | ArgumentsDone
)


class Deleted(msgspec.Struct):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class ItemList(msgspec.Struct):
    """``input_items``: the items as stored (JSON objects, each with an ``id``)."""

    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


# -- what a Responses upstream answers -------------------------------------------------------


class UpstreamPart(msgspec.Struct):
    type: str = ""
    text: str | None = None
    refusal: str | None = None


class UpstreamItem(msgspec.Struct):
    type: str = ""
    id: str | None = None
    role: str | None = None
    content: list[UpstreamPart] | None = None
    summary: list[UpstreamPart] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class UpstreamInputTokensDetails(msgspec.Struct):
    cached_tokens: int | None = None


class UpstreamUsage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    input_tokens_details: UpstreamInputTokensDetails | None = None


class UpstreamError(msgspec.Struct):
    code: str | None = None
    message: str | None = None
    type: str | None = None
    param: str | None = None


class UpstreamIncomplete(msgspec.Struct):
    reason: str | None = None


class UpstreamResponse(msgspec.Struct):
    id: str | None = None
    status: str | None = None
    output: list[UpstreamItem] | None = None
    usage: UpstreamUsage | None = None
    error: UpstreamError | None = None
    incomplete_details: UpstreamIncomplete | None = None


class UpstreamEvent(msgspec.Struct):
    """One stream event, read by ``type``."""

    type: str = ""
    response: UpstreamResponse | None = None
    item: UpstreamItem | None = None
    output_index: int | None = None
    delta: str | None = None
    arguments: str | None = None
    message: str | None = None
    code: str | None = None
    error: UpstreamError | str | None = None
