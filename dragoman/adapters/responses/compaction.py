"""Compaction (``POST /v1/responses/compact``, ``context_management`` on create): the
items of a conversation become its user messages, kept as they were, followed by one
``compaction`` item holding a summary the model writes of everything else.

OpenAI's compaction item carries the model's own encrypted state; a local model has
none, so here the summary is text the model wrote, and the next turn reads it as a
system message in the compaction item's place (:mod:`convert`). What is approximated:
the model sees a summary, not the earlier turns, and a small model's summary can lose
detail; tool calls and results survive only as the summary tells them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import ChatRequest, Message, SamplingOptions, TextPart
from dragoman.adapters.errors import RequestError
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.ids import encode_compaction, new_compaction_id, new_response_id

# The summary's length bound: a summary longer than this is cut at it (the model is
# asked for much less).
MAX_SUMMARY_TOKENS = 256

INSTRUCTIONS = (
    "You compact conversations. Summarize the conversation below so that it can be continued from the summary "
    "alone: the user's goals, what was decided or answered, facts and names mentioned, tool calls made and their "
    "results, and anything still open. Write plain prose, at most 200 words. Do not answer the user."
)


class CompactRequest(msgspec.Struct, kw_only=True):
    model: str
    input: str | list[wire.InputItem] = msgspec.field(default_factory=list)
    instructions: str | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None


class CompactedResponse(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    output: list[dict[str, Any]]
    usage: wire.Usage
    object: Literal["response.compaction"] = "response.compaction"
    safety_identifier: str | None = None


def compaction_threshold(entries: list[wire.ContextManagement] | None) -> int | None:
    """The prompt length past which a create compacts first: 0 for "the model's default"
    (the caller picks it from the context length); None: never."""
    threshold = None
    for i, entry in enumerate(entries or ()):
        if entry.type != "compaction":
            param = f"context_management[{i}].type"
            raise RequestError(f"{param}: unsupported value '{entry.type}'; allowed: compaction", param=param)
        if entry.compact_threshold is not None and entry.compact_threshold < 1:
            param = f"context_management[{i}].compact_threshold"
            raise RequestError(f"{param}: must be at least 1", param=param)
        threshold = entry.compact_threshold or 0
    return threshold


def latest_compaction_view(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a turn reads of a conversation that holds compaction items: before the
    latest one only the user messages (as ``/v1/responses/compact`` keeps them), then
    everything from it on; the items themselves stay in the conversation."""
    last = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if last is None:
        return items
    return [*(item for item in items[:last] if is_user_message(item)), *items[last:]]


def is_user_message(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def summary_request(model: str, messages: list[Message]) -> ChatRequest:
    """The request that asks the model for the summary of ``messages`` (the canonical
    conversation being compacted), as one transcript in one user message."""
    transcript = "\n".join(line for message in messages if (line := _transcript_line(message)))
    return ChatRequest(
        model=model,
        messages=[
            Message(role="system", parts=[TextPart(INSTRUCTIONS)]),
            Message(role="user", parts=[TextPart(f"Here is a conversation:\n\n{transcript}\n\nSummarize it in a few sentences.")]),
        ],
        options=SamplingOptions(temperature=0.0, num_predict=MAX_SUMMARY_TOKENS),
    )


def compacted_items(items: list[dict[str, Any]], summary: ChatResult) -> list[dict[str, Any]]:
    """The user messages of ``items`` in order, then the compaction item."""
    compaction = wire.CompactionItem(id=new_compaction_id(), encrypted_content=encode_compaction(summary.content.strip()))
    return [*(item for item in items if is_user_message(item)), msgspec.to_builtins(compaction)]


def compacted_response(items: list[dict[str, Any]], summary: ChatResult, created_at: int, safety_identifier: str | None) -> CompactedResponse:
    usage = summary.usage
    return CompactedResponse(
        id=new_response_id(),
        created_at=created_at,
        output=compacted_items(items, summary),
        usage=wire.Usage(
            input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
            input_tokens_details=wire.InputTokensDetails(cached_tokens=usage.cached_tokens or 0),
        ),  # fmt: skip
        safety_identifier=safety_identifier,
    )


def _transcript_line(message: Message) -> str:
    text = "".join(part.text if isinstance(part, TextPart) else "[image]" for part in message.parts)
    if message.role == "tool":
        return f"Tool result ({message.tool_name or 'unknown'}): {text}"
    calls = "; ".join(f"Called {call.name}({json.dumps(call.arguments, ensure_ascii=False)})" for call in message.tool_calls)
    body = " ".join(piece for piece in (text, calls) if piece)
    return f"{message.role.capitalize()}: {body}" if body else ""


__all__ = [
    "CompactRequest",
    "CompactedResponse",
    "latest_compaction_view",
    "compacted_items",
    "compacted_response",
    "compaction_threshold",
    "is_user_message",
    "summary_request",
]
