"""OpenAI Chat Completions on the wire, spelled as the seed spec and the real API spell it.

Three groups: what clients send (decoded by Litestar, so extra fields are tolerated and
the class names are the seed spec's component names), what we answer (``omit_defaults``
where a field must be absent rather than ``null``; fields that must always appear, such
as ``content: null``, have no default), and what an OpenAI-speaking upstream answers
(every field optional, because servers differ in what they leave out).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
# JSON integers are unbounded; backends take 64 bits (past that, serialization fails).
Int64 = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]

# -- requests from clients ---------------------------------------------------------------


class ImageURL(msgspec.Struct):
    url: str
    detail: str | None = None


class ContentPart(msgspec.Struct):
    """``type`` stays a plain string so an unsupported part is refused by name."""

    type: str
    text: str | None = None
    # Some clients send the URL string itself instead of ``{"url": …}``.
    image_url: ImageURL | str | None = None


class OpenAIFunctionCall(msgspec.Struct):
    name: str
    # A JSON string per the API; an object is accepted as well.
    arguments: str | dict[str, Any] = ""


class OpenAIToolCall(msgspec.Struct):
    function: OpenAIFunctionCall
    id: str | None = None
    type: Literal["function"] = "function"
    index: int | None = None


class ChatCompletionMessage(msgspec.Struct):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[OpenAIToolCall] | None = None
    tool_call_id: str | None = None
    # Earlier thinking of an assistant turn: Ollama spells it ``reasoning``, most others
    # ``reasoning_content``.
    reasoning: str | None = None
    reasoning_content: str | None = None


class OpenAIFunctionDefinition(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OpenAIToolDefinition(msgspec.Struct):
    type: Literal["function"]
    function: OpenAIFunctionDefinition


class FunctionName(msgspec.Struct):
    name: str


class NamedToolChoice(msgspec.Struct):
    function: FunctionName
    type: Literal["function"] = "function"


class JSONSchemaFormat(msgspec.Struct):
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(msgspec.Struct):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JSONSchemaFormat | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ReasoningOptions(msgspec.Struct):
    effort: str | None = None


class ChatCompletionRequest(msgspec.Struct):
    model: str
    messages: list[ChatCompletionMessage]
    temperature: Temperature | None = None
    top_p: TopP | None = None
    # OpenAI refuses a negative count; taken, it meant "until the context is full".
    max_tokens: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    max_completion_tokens: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    seed: Int64 | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False  # null: the default (nullable in OpenAI's spec); False after decoding
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    tools: list[OpenAIToolDefinition] | None = None
    tool_choice: str | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    reasoning: ReasoningOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    n: int | None = None
    logit_bias: dict[str, float] | None = None
    # llama-server's: prompt_progress chunks while the prompt is read (stream only).
    return_progress: bool | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    # Extra body fields as vLLM takes them; Ollama's own sampling knobs, in Ollama's
    # ranges (a request must mean the same whichever backend or upstream answers it).
    top_k: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    min_p: TopP | None = None
    repeat_penalty: float | None = None
    # Extension: seconds, or a Go duration string as Ollama's ``keep_alive``.
    keep_alive: float | str | None = None

    def __post_init__(self) -> None:
        if self.stream is None:
            self.stream = False


# -- responses to clients ----------------------------------------------------------------


class ResponseFunction(msgspec.Struct):
    name: str
    arguments: str


class ResponseToolCall(msgspec.Struct):
    id: str
    type: Literal["function"]
    function: ResponseFunction


class ChatCompletionResponseMessage(msgspec.Struct, omit_defaults=True):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ResponseToolCall] | None = None


class TopLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class Logprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(msgspec.Struct):
    content: list[Logprob]


class ChatCompletionChoice(msgspec.Struct, omit_defaults=True):
    index: int
    message: ChatCompletionResponseMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int


class UsageStats(msgspec.Struct, omit_defaults=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    # Present when the backend knows its prompt-cache hits (OpenAI always sends it).
    prompt_tokens_details: PromptTokensDetails | None = None


class ChatCompletionResponse(msgspec.Struct):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatCompletionChoice]
    usage: UsageStats


class FunctionDelta(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, omit_defaults=True):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta | None = None


class ChatCompletionDelta(msgspec.Struct, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatCompletionStreamChoice(msgspec.Struct, omit_defaults=True):
    index: int
    delta: ChatCompletionDelta
    finish_reason: str | None  # no default: ``null`` until the last chunk
    logprobs: ChoiceLogprobs | None = None


class PromptProgressStats(msgspec.Struct):
    """llama-server's ``prompt_progress``: ``processed`` of ``total`` prompt tokens read,
    ``cache`` of them from a cache, ``time_ms`` since the prompt began."""

    total: int
    cache: int
    processed: int
    time_ms: int


class ChatCompletionStreamResponse(msgspec.Struct, omit_defaults=True):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatCompletionStreamChoice]
    usage: UsageStats | None = None
    prompt_progress: PromptProgressStats | None = None  # return_progress: a chunk with no choices


class OpenAIErrorDetail(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorResponse(msgspec.Struct):
    error: OpenAIErrorDetail


# -- what OpenAI-speaking upstreams answer -------------------------------------------------


class UpstreamFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class UpstreamToolCall(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: UpstreamFunction | None = None


class UpstreamMessage(msgspec.Struct):
    """Both a whole message and a stream delta."""

    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[UpstreamToolCall] | None = None


class UpstreamTopLogprob(msgspec.Struct):
    token: str = ""
    logprob: float = 0.0
    bytes: list[int] | None = None


class UpstreamLogprob(msgspec.Struct):
    token: str = ""
    logprob: float = 0.0
    bytes: list[int] | None = None
    top_logprobs: list[UpstreamTopLogprob] | None = None


class UpstreamLogprobs(msgspec.Struct):
    """Chat's ``content`` list, or ``/v1/completions``' legacy parallel lists."""

    content: list[UpstreamLogprob] | None = None
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None


class UpstreamChoice(msgspec.Struct):
    """A chat choice (``message`` or ``delta``) or a completion choice (``text``)."""

    index: int = 0
    message: UpstreamMessage | None = None
    delta: UpstreamMessage | None = None
    text: str | None = None
    finish_reason: str | None = None
    logprobs: UpstreamLogprobs | None = None


class UpstreamPromptTokensDetails(msgspec.Struct):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None  # OpenRouter's, for upstreams that bill cache writes


class UpstreamUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: UpstreamPromptTokensDetails | None = None  # vLLM writes null


class UpstreamErrorDetail(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class UpstreamReply(msgspec.Struct):
    """A whole reply or one stream chunk; ``error`` as servers send it, an object or a
    bare string (Ollama's native spelling)."""

    choices: list[UpstreamChoice] | None = None
    usage: UpstreamUsage | None = None
    error: UpstreamErrorDetail | str | None = None
