"""Per-request bounds: images, and max_tokens against the context."""

from __future__ import annotations

import msgspec

from adapters.canonical import ChatRequest
from adapters.errors import DragomanError, RequestError
from config.schema import Limits


class PayloadTooLarge(DragomanError):
    status = 413


def check_request(request: ChatRequest, limits: Limits) -> None:
    """Refuse requests that carry more images or image bytes than allowed."""
    images = [image for message in request.messages for image in message.images]
    if len(images) > limits.max_images:
        raise RequestError(
            f"messages: {len(images)} images in one request; the limit is {limits.max_images}", param="messages"
        )
    total = sum(len(image.data) for image in images)
    if total > limits.max_image_bytes:
        raise PayloadTooLarge(
            f"messages: images total {total} bytes; the limit is {limits.max_image_bytes}", param="messages"
        )


def clamp_max_tokens(request: ChatRequest, context_length: int | None) -> ChatRequest:
    """A ``max_tokens`` beyond the model's whole context can never be honoured; clamp
    it rather than reserve (and preallocate) what cannot be used."""
    wanted = request.options.num_predict
    if context_length is None or wanted is None or wanted <= context_length:
        return request
    options = msgspec.structs.replace(request.options, num_predict=context_length)
    return msgspec.structs.replace(request, options=options)
