"""What a Responses reply echoes of its request (``ResponseMeta``): the fields the
response object repeats, with the sampling numbers the model ran with."""

from __future__ import annotations

from typing import Any

import msgspec

from dragoman.adapters.canonical import SamplingOptions
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.conversations import conversation_id
from dragoman.adapters.responses.convert import ENCRYPTED_REASONING


class ResponseMeta(msgspec.Struct, frozen=True):
    """What a reply echoes of its request."""

    model: str
    store: bool
    instructions: str | None = None
    tools: list[dict[str, Any]] = []
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_logprobs: int = 0
    text: wire.TextConfig | None = None
    reasoning: wire.ReasoningConfig | None = None
    truncation: str = "disabled"
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    previous_response_id: str | None = None
    metadata: dict[str, str] = {}
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    conversation: str | None = None
    background: bool = False
    compaction: wire.CompactionItem | None = None  # made before this turn ran (context_management): output's first item
    encrypted_reasoning: bool = False


# What OpenAI samples with when neither the request nor the model entry says.
_DEFAULT_TEMPERATURE = 1.0
_DEFAULT_TOP_P = 1.0


def meta_for(
    request: wire.ResponsesRequest, *, store: bool, used: SamplingOptions | None = None,
    compaction: wire.CompactionItem | None = None,
) -> ResponseMeta:
    """``used``: the sampling options the model ran with (the request's, filled from the
    model entry's defaults), so the reply names the numbers, not nulls."""
    used = used or SamplingOptions(temperature=request.temperature, top_p=request.top_p)
    return ResponseMeta(
        model=request.model,
        store=store,
        instructions=request.instructions,
        tools=echoed_tools(request.tools),
        tool_choice=request.tool_choice or "auto",
        parallel_tool_calls=request.parallel_tool_calls is not False,
        temperature=_or(used.temperature, _DEFAULT_TEMPERATURE),
        top_p=_or(used.top_p, _DEFAULT_TOP_P),
        presence_penalty=_or(used.presence_penalty, 0.0),
        frequency_penalty=_or(used.frequency_penalty, 0.0),
        top_logprobs=request.top_logprobs or 0,
        text=request.text,
        reasoning=request.reasoning,
        truncation=request.truncation or "disabled",
        max_output_tokens=request.max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        previous_response_id=request.previous_response_id,
        metadata=request.metadata or {},
        user=request.user,
        prompt_cache_key=request.prompt_cache_key,
        safety_identifier=request.safety_identifier,
        conversation=conversation_id(request),
        background=request.background is True,
        compaction=compaction,
        encrypted_reasoning=ENCRYPTED_REASONING in (request.include or ()),
    )


def echoed_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The tools as sent; a function tool without ``strict`` says ``strict: false`` (the
    response object requires the field, and dragoman does not constrain a call's
    arguments to its schema, so ``true`` would promise what is not done)."""
    return [{**tool, "strict": False} if tool.get("type") == "function" and "strict" not in tool else tool for tool in tools or ()]


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


__all__ = ["ResponseMeta", "echoed_tools", "meta_for"]
