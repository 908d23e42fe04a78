"""A canonical request as the body for an Anthropic-speaking upstream (``/v1/messages``).

Anthropic wants the system prompt apart, tool results inside the next user turn, turns
that alternate, and ``max_tokens`` always; thinking in history goes back only with the
signature Anthropic gave it. Sampling options Anthropic has no field for are dropped
and named, for the caller to log.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from dragoman.adapters.anthropic.ids import is_own_signature, new_tool_use_id
from dragoman.adapters.call_ids import paired_calls
from dragoman.adapters.canonical import ChatRequest, ImagePart, Message, TextPart, ThinkLevel, ToolChoice
from dragoman.adapters.images import sniff_image_mime

# Sampling options without an Anthropic field (temperature, top_p, top_k, stop have one).
UNCARRIED = ("min_p", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty", "tfs_z",
             "mirostat", "mirostat_tau", "mirostat_eta", "seed", "num_ctx")  # fmt: skip
# A depth as a thinking budget (the reverse of think_level_for_budget, documented).
BUDGETS: dict[ThinkLevel, int] = {"low": 2048, "medium": 8192, "high": 24576}
MIN_BUDGET = 1024

_encoder = msgspec.json.Encoder()


def to_upstream(request: ChatRequest, model: str, *, default_max_tokens: int, count: bool = False) -> tuple[bytes, list[str]]:
    """The body, and the names of the options it could not carry. ``count`` writes the
    ``/v1/messages/count_tokens`` body (the prompt only)."""
    system, turns = _turns(request.messages)
    body: dict[str, Any] = {"model": model, "messages": turns}
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": t.name, **({"description": t.description} if t.description else {}),
             "input_schema": t.parameters or {"type": "object", "properties": {}}}
            for t in request.tools
        ]  # fmt: skip
        choice = _tool_choice(request.tool_choice, request.parallel_tool_calls)
        if choice is not None:
            body["tool_choice"] = choice
    if count:
        return _encoder.encode(body), []
    options = request.options
    max_tokens = options.num_predict if options.num_predict is not None and options.num_predict > 0 else default_max_tokens
    body["max_tokens"] = max_tokens
    for name in ("temperature", "top_p", "top_k"):
        if (value := getattr(options, name)) is not None:
            body[name] = value
    if options.stop:
        body["stop_sequences"] = options.stop
    if (thinking := _thinking(request, max_tokens)) is not None:
        body["thinking"] = thinking
    if request.response_format.type != "text":
        schema = request.response_format.schema or {"type": "object"}
        body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    body["stream"] = request.stream
    dropped = [name for name in UNCARRIED if getattr(options, name) is not None]
    return _encoder.encode(body), dropped


def _tool_choice(choice: ToolChoice, parallel: bool | None) -> dict[str, Any] | None:
    if choice.mode == "function":
        wire: dict[str, Any] = {"type": "tool", "name": choice.name}
    elif choice.mode == "required":
        wire = {"type": "any"}
    elif choice.mode == "none":
        return {"type": "none"}
    elif parallel is False:
        wire = {"type": "auto"}
    else:
        return None
    if parallel is False:
        wire["disable_parallel_tool_use"] = True
    return wire


def _thinking(request: ChatRequest, max_tokens: int) -> dict[str, Any] | None:
    if request.think is False:
        return {"type": "disabled"}
    if not request.think:
        return None
    # Anthropic wants 1024 <= budget < max_tokens.
    budget = min(BUDGETS[request.think_level or "medium"], max_tokens - 1)
    return {"type": "enabled", "budget_tokens": budget} if budget >= MIN_BUDGET else None


def _turns(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text, and the turns: each tool result a block of the user turn that
    follows its call, consecutive turns of one role merged (Anthropic alternates)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in paired_calls(messages, new_tool_use_id):
        if message.role == "system":
            # Anthropic has one system prompt: later system messages join it (docs/fidelity.md).
            if message.text:
                system.append(message.text)
            continue
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": _content(message)}
        return "user", [result]
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        signature = message.thinking_signature
        # Anthropic verifies signatures: thinking goes back only with one it issued.
        if message.thinking and signature and not is_own_signature(signature):
            blocks.append({"type": "thinking", "thinking": message.thinking, "signature": signature})
        blocks += _content(message)
        blocks += [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments} for call in message.tool_calls]
        return "assistant", blocks
    return "user", _content(message)  # user, and roles Anthropic does not know


def _content(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:  # Anthropic refuses empty text blocks
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            mime = sniff_image_mime(part.data) or part.mime_type
            data = base64.b64encode(part.data).decode("ascii")
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
    return blocks


__all__ = ["to_upstream"]
