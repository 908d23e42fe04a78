"""Per-request bounds: images, and max_tokens against the context."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from adapters.canonical import ChatRequest, CompletionRequest
from adapters.errors import DragomanError, RequestError
from config.schema import Limits

R = TypeVar("R", ChatRequest, CompletionRequest)


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
