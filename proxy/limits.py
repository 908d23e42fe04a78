"""Per-request bounds and the per-model admission gate."""

from __future__ import annotations

import asyncio
from collections import deque

import msgspec

from adapters.canonical import ChatRequest
from adapters.errors import DragomanError, Overloaded, RequestError
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


class ModelGate:
    """At most ``max_concurrent`` chats of one model at once and ``max_queue`` waiting;
    beyond that a 503 with Retry-After, at once, rather than an unbounded wait."""

    def __init__(self, name: str, max_concurrent: int, max_queue: int) -> None:
        self.name = name
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.active < self.max_concurrent and not self._waiters:
            self.active += 1
            return
        if len(self._waiters) >= self.max_queue:
            raise Overloaded(
                f"model '{self.name}' is busy: {self.active} running, {len(self._waiters)} waiting; try again",
                retry_after=1,
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot over, so active is already counted
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot arrived as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.active -= 1
