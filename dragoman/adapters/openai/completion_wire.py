"""OpenAI's legacy ``/v1/completions`` on the wire, as the API and vLLM spell it.

Requests are decoded by Litestar (extra fields tolerated); checks that types cannot
express (token-id prompts, ``best_of``, ``n``) are :mod:`adapters.openai.completions`'.
A streamed chunk has the same shape as a whole reply (unlike chat): ``choices`` with
``text``, a ``finish_reason`` that is ``null`` until a choice ends, and ``logprobs`` in
the legacy shape (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from dragoman.adapters.openai.wire import Int64, Penalty, StreamOptions, Temperature, TopP, UsageStats

# OpenAI allows up to 5 alternatives here; 20 is what the chat endpoint allows.
MAX_LOGPROBS = 20


class CompletionRequest(msgspec.Struct):
    model: str
    # A string or a list of strings (one choice each); lists of token ids are refused
    # by name in convert (msgspec cannot tell list[str] from list[int] in a union).
    prompt: str | list[Any]
    suffix: str | None = None
    # OpenAI's and vLLM's default is 16 tokens.
    max_tokens: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: int | None = None
    best_of: int | None = None
    stream: bool | None = False  # null: the default, for both (nullable in OpenAI's spec)
    stream_options: StreamOptions | None = None
    logprobs: Annotated[int, Meta(ge=0, le=MAX_LOGPROBS)] | None = None
    echo: bool | None = False
    stop: str | list[str] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: Int64 | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # Extensions as on the chat endpoint: vLLM's extra sampling fields, Ollama's keep_alive.
    top_k: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    min_p: TopP | None = None
    repeat_penalty: float | None = None
    keep_alive: float | str | None = None

    def __post_init__(self) -> None:
        self.stream, self.echo = bool(self.stream), bool(self.echo)


class CompletionLogprobs(msgspec.Struct):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    logprobs: CompletionLogprobs | None  # no defaults: OpenAI writes both as null
    finish_reason: Literal["stop", "length"] | None


class Completion(msgspec.Struct, omit_defaults=True):
    """A whole reply, a stream chunk (no ``usage``), or the usage chunk (no choices)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: UsageStats | None = None
