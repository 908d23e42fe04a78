"""What the routes answer, as the OpenAPI document states it.

Left to itself Litestar documents a handler that returns ``bytes`` as a string and every
400 as its own ``{status_code, detail}``; dragoman answers JSON replies and errors in the
caller's dialect, so those routes name their responses here.
"""

from __future__ import annotations

from litestar.openapi.datastructures import ResponseSpec

from dragoman.adapters import ollama, openai
from dragoman.adapters.ollama import wire as ollama_wire
from dragoman.adapters.openai import completion_wire
from dragoman.adapters.anthropic import wire as anthropic_wire
from dragoman.adapters.openai.wire import OpenAIErrorResponse
from dragoman.backends.pull import PullProgress
from dragoman.adapters.responses import wire as responses_wire

_ERROR_STATUSES = {
    400: "A bad field, named in the message (and in `param` for OpenAI clients).",
    401: "API keys are configured and the request has none or a wrong one.",
    403: "Refused by the configuration; the message names the setting.",
    404: "No such model.",
    409: "The model is in use: a config entry serves it, a worker has it loaded, or the name is another model's.",
    413: "The body or its images are larger than the configured limits.",
    502: "The backend or upstream failed before the reply began.",
    503: "The model is busy (see `Retry-After`) or the server is shutting down.",
    504: "The backend or upstream timed out.",
    501: "Not done over the API: models are configured in the YAML file.",
    529: "Anthropic's status for 503: the model is busy (see `Retry-After`) or the server is shutting down.",
}


def _errors(body: type, statuses: tuple[int, ...]) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(body, description=_ERROR_STATUSES[status], generate_examples=False) for status in statuses
    }


_CHAT_ERRORS = (400, 401, 404, 413, 502, 503, 504)

OPENAI_CHAT = {
    200: ResponseSpec(
        openai.ChatCompletionResponse,
        description="The reply. With `stream: true`, `text/event-stream` instead: `data: <chat.completion.chunk>` "
        "events ending with `data: [DONE]`.",
        generate_examples=False,
    ),
    **_errors(OpenAIErrorResponse, _CHAT_ERRORS),
}
OPENAI_MODEL = _errors(OpenAIErrorResponse, (400, 404))

OLLAMA_CHAT = {
    200: ResponseSpec(
        ollama.ChatResponse,
        description="The reply with `stream: false`. Otherwise (the default) `application/x-ndjson`: one such "
        "object per line, the last with `done: true`, or a last `{\"error\": …}` line.",
        generate_examples=False,
    ),
    **_errors(ollama.ErrorResponse, _CHAT_ERRORS),
}
OLLAMA_SHOW = _errors(ollama.ErrorResponse, (400, 404))

OLLAMA_GENERATE = {
    200: ResponseSpec(
        ollama_wire.GenerateResponse,
        description="The reply with `stream: false`. Otherwise (the default) `application/x-ndjson`: one such "
        "object per line (`response` text), the last with `done: true`, or a last `{\"error\": …}` line.",
        generate_examples=False,
    ),
    **_errors(ollama.ErrorResponse, _CHAT_ERRORS),
}
OPENAI_COMPLETION = {
    200: ResponseSpec(
        completion_wire.Completion,
        description="The reply, one choice per prompt. With `stream: true`, `text/event-stream` instead: "
        "`data: <text_completion>` chunks ending with `data: [DONE]`.",
        generate_examples=False,
    ),
    **_errors(OpenAIErrorResponse, _CHAT_ERRORS),
}
OLLAMA_PULL = {
    200: ResponseSpec(
        PullProgress,
        description="With `stream: false`, the last progress object (`{\"status\": \"success\"}`). Otherwise "
        "`application/x-ndjson`: one progress object per line, or a last `{\"error\": …}` line.",
        generate_examples=False,
    ),
    **_errors(ollama.ErrorResponse, (400, 403, 404, 502)),
}
OLLAMA_ADMIN = _errors(ollama.ErrorResponse, (501,))
OLLAMA_DELETE_COPY = _errors(ollama.ErrorResponse, (400, 404, 409))
ANTHROPIC_MESSAGES = {
    200: ResponseSpec(
        anthropic_wire.Message,
        description="The reply. With `stream: true`, `text/event-stream` instead: named events `message_start`, "
        "`ping`, `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop` (or `error`).",
        generate_examples=False,
    ),
    **_errors(anthropic_wire.ErrorResponse, (400, 401, 404, 413, 502, 504, 529)),
}
ANTHROPIC_COUNT = {
    200: ResponseSpec(anthropic_wire.TokenCount, description="The prompt's length in tokens.", generate_examples=False),
    **_errors(anthropic_wire.ErrorResponse, (400, 401, 404, 413, 502, 504, 529)),
}
RESPONSES_CREATE = {
    200: ResponseSpec(
        responses_wire.Response,
        description="The response. With `stream: true`, `text/event-stream` instead: typed events from "
        "`response.created` to `response.completed` / `response.incomplete` / `response.failed`.",
        generate_examples=False,
    ),
    **_errors(OpenAIErrorResponse, _CHAT_ERRORS),
}
RESPONSES_STORED = {
    200: ResponseSpec(responses_wire.Response, description="The stored response.", generate_examples=False),
    **_errors(OpenAIErrorResponse, (400, 404)),
}
RESPONSES_DELETED = {
    200: ResponseSpec(responses_wire.Deleted, description="Deleted.", generate_examples=False),
    **_errors(OpenAIErrorResponse, (404,)),
}
RESPONSES_ITEMS = {
    200: ResponseSpec(responses_wire.ItemList, description="The input items, newest first unless `order=asc`.", generate_examples=False),
    **_errors(OpenAIErrorResponse, (400, 404)),
}
