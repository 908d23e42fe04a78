"""Per-request bounds, checked before any work: images, stop strings, prompt size,
nesting of free-form JSON, the complexity of schemas compiled into grammars; and
max_tokens against the context."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from dragoman.adapters.canonical import ChatRequest, CompletionRequest
from dragoman.adapters.dialects import dialect_named
from dragoman.adapters.errors import DragomanError, RequestError
from dragoman.adapters.json_depth import too_deep
from dragoman.adapters.schema_budget import SchemaBudget, check_schemas
from dragoman.config.schema import Limits
from dragoman.proxy.record import Dialect

R = TypeVar("R", ChatRequest, CompletionRequest)

def _param(field: str) -> str:
    """The path part of a field named by Dialect.message_field or Dialect.call_field."""
    return field.split(" (", 1)[0]


class PayloadTooLarge(DragomanError):
    status = 413


def check_request(request: ChatRequest | CompletionRequest, limits: Limits) -> None:
    """Refuse requests that carry more images or image bytes than allowed."""
    if isinstance(request, ChatRequest):
        images, param = [image for message in request.messages for image in message.images], "messages"
    else:
        images, param = request.images, "images"
    if len(images) > limits.max_images:
        raise RequestError(f"{param}: {len(images)} images in one request; the limit is {limits.max_images}", param=param)
    total = sum(len(image.data) for image in images)
    if total > limits.max_image_bytes:
        raise PayloadTooLarge(f"{param}: images total {total} bytes; the limit is {limits.max_image_bytes}", param=param)


def check_message_count(count: int, limits: Limits, field: str = "messages") -> None:
    """Refuse a conversation longer than allowed before it is converted: the
    conversion, the bounds below and the template all cost time per message."""
    if count > limits.max_messages:
        raise RequestError(
            f"{field}: {count} messages in one request; the limit is {limits.max_messages} "
            "(server.limits.max_messages)",
            param=field,
        )


def check_prompts(count: int, limits: Limits) -> None:
    """Refuse a ``/v1/completions`` prompt list longer than allowed, before any runs."""
    if count > limits.max_prompts:
        raise RequestError(f"prompt: {count} prompts in one request; the limit is {limits.max_prompts}", param="prompt")


def clamp_to_context(request: R, context_length: int | None) -> R:
    """The entry's ``context_length`` is the operator's memory bound, in every dialect:
    a larger ``num_ctx`` is clamped to it (a prompt that does not fit is then refused
    as it would be on ``/v1``), and so is a ``max_tokens`` beyond the whole context,
    rather than reserving (and preallocating) what cannot be used."""
    if context_length is None:
        return request
    changes = {
        field: context_length
        for field in ("num_ctx", "num_predict")
        if (wanted := getattr(request.options, field)) is not None and wanted > context_length
    }
    if not changes:
        return request
    return msgspec.structs.replace(request, options=msgspec.structs.replace(request.options, **changes))


def check_request_shape(request: ChatRequest | CompletionRequest, limits: Limits, dialect: Dialect) -> None:
    """Refuse what costs work in proportion to its size beyond ``limits`` (stop strings,
    prompt characters, JSON nesting), with a 400 naming the field as ``dialect``
    spells it and the ``server.limits`` key that sets the bound."""
    _check_stop(request, limits, dialect)
    _check_prompt(request, limits, dialect)
    _check_depth(request, limits, dialect)


def check_image_count(count: int, limits: Limits) -> None:
    """The image limit for parts not decoded yet (URLs to fetch count too)."""
    if count > limits.max_images:
        raise RequestError(
            f"messages: {count} images in one request; the limit is {limits.max_images} (server.limits.max_images)",
            param="messages",
        )


def check_model_name(name: str, limits: Limits) -> None:
    if len(name) > limits.max_model_name:
        raise RequestError(
            f"model: the name is {len(name)} characters long; the limit is {limits.max_model_name} "
            "(server.limits.max_model_name)",
            param="model",
        )


def _check_stop(request: ChatRequest | CompletionRequest, limits: Limits, dialect: Dialect) -> None:
    stop = request.options.stop
    if not stop:
        return
    field = dialect_named(dialect).field("stop")
    if len(stop) > limits.max_stop:
        raise RequestError(
            f"{field}: {len(stop)} stop strings; the limit is {limits.max_stop} (server.limits.max_stop)", param=field
        )
    for i, text in enumerate(stop):
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limits.max_stop_bytes:
            raise RequestError(
                f"{field}[{i}]: a stop string of {size} bytes; the limit is {limits.max_stop_bytes} "
                "(server.limits.max_stop_bytes)",
                param=f"{field}[{i}]",
            )


def _check_prompt(request: ChatRequest | CompletionRequest, limits: Limits, dialect: Dialect) -> None:
    if isinstance(request, ChatRequest):
        texts = [
            (dialect_named(dialect).message_field(i, m.role), sum(len(p.text) for p in m.parts if hasattr(p, "text")) + len(m.thinking or ""))
            for i, m in enumerate(request.messages)
        ]
        everything = dialect_named(dialect).field("conversation")
    else:
        texts = [(f, len(getattr(request, f) or "")) for f in ("prompt", "suffix", "system")]
        everything = "prompt"
    total = 0
    for field, size in texts:
        if size > limits.max_message_chars:
            raise RequestError(
                f"{field}: {size} characters; the limit is {limits.max_message_chars} "
                "(server.limits.max_message_chars)",
                param=_param(field),
            )
        total += size
    if total > limits.max_prompt_chars:
        raise RequestError(
            f"{everything}: {total} characters in all; the limit is {limits.max_prompt_chars} "
            "(server.limits.max_prompt_chars)",
            param=everything,
        )


def _check_depth(request: ChatRequest | CompletionRequest, limits: Limits, dialect: Dialect) -> None:
    """Free-form JSON (schemas, arguments) is walked by templates, grammar compilers
    and encoders that recurse; bound its nesting before any of them runs."""
    limit = limits.max_json_depth
    schema_field = dialect_named(dialect).field("schema")
    found: list[tuple[str, Any]] = [(schema_field, request.response_format.schema)]
    if isinstance(request, ChatRequest):
        tool_field = dialect_named(dialect).field("tool_schema")
        found += [(tool_field.format(i), tool.parameters) for i, tool in enumerate(request.tools)]
        found += [
            (dialect_named(dialect).call_field(i, j, call.id, call.name), call.arguments)
            for i, message in enumerate(request.messages)
            for j, call in enumerate(message.tool_calls)
        ]
    for field, value in found:
        if value and too_deep(value, limit):
            raise RequestError(
                f"{field}: JSON nested more than {limit} levels deep (server.limits.max_json_depth)", param=_param(field)
            )


def check_grammars(request: ChatRequest | CompletionRequest, budget: SchemaBudget, dialect: Dialect) -> None:
    """The schemas a request would have compiled (structured output; the tools'
    parameters when a call is forced) against the budget, before any work."""
    schemas: list[tuple[str, object]] = []
    if request.response_format.type == "json_schema" and request.response_format.schema is not None:
        schemas.append((dialect_named(dialect).field("schema"), request.response_format.schema))
    if isinstance(request, ChatRequest) and (choice := request.tool_choice).mode in ("required", "function"):
        tool_field = dialect_named(dialect).field("tool_schema")
        schemas += [
            (tool_field.format(i), tool.parameters)
            for i, tool in enumerate(request.tools)
            if choice.mode == "required" or tool.name == choice.name
        ]
    check_schemas(schemas, budget)
