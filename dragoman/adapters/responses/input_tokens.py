"""``POST /v1/responses/input_tokens``: what a create request would send the model,
counted rather than answered. The body is a create request's fields that shape the
prompt; it becomes a :class:`wire.ResponsesRequest` and goes through the same converter,
so the count is of the prompt the model would see."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from dragoman.adapters.responses import wire


class InputTokensRequest(msgspec.Struct, kw_only=True):
    model: str  # optional in OpenAI's spec; here it names the tokenizer, so it is required
    input: str | list[wire.InputItem] = msgspec.field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: wire.TextConfig | None = None
    reasoning: wire.ReasoningConfig | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    truncation: Literal["auto", "disabled"] | None = None
    personality: str | None = None  # a hosted-model persona: nothing here to apply


class InputTokenCount(msgspec.Struct):
    input_tokens: int
    object: Literal["response.input_tokens"] = "response.input_tokens"


def as_create(request: InputTokensRequest) -> wire.ResponsesRequest:
    return wire.ResponsesRequest(
        model=request.model,
        input=request.input,
        instructions=request.instructions,
        tools=request.tools,
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
        text=request.text,
        reasoning=request.reasoning,
        previous_response_id=request.previous_response_id,
        conversation=request.conversation,
        truncation=request.truncation,
    )


__all__ = ["InputTokenCount", "InputTokensRequest", "as_create"]
