"""A request's generation on a worker thread, as the event loop sees it, and the
record of how it ended."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import msgspec


class RequestRecord(msgspec.Struct, frozen=True):
    """How a request ended, kept for the last 100 (``tokens_at_cancel`` is what the
    worker had generated when the client went away — the client may have read fewer,
    as text waits in the queue when the loop is busy; generation must stop within a
    token of it)."""

    request_id: int
    reason: str
    prompt_tokens: int
    completion_tokens: int
    tokens_at_cancel: int | None = None


class Refused(msgspec.Struct, frozen=True):
    """The worker's answer to a prompt longer than the context, by the library's count."""

    prompt_tokens: int
    limit: int


END = object()  # on a run's queue once its worker thread has stopped


class Run:
    """One request's generation as the event loop sees it: text arrives on ``queue``
    from the worker thread; ``cancel`` stops that thread before its next token."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request_id: int) -> None:
        self.loop = loop
        self.request_id = request_id
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.cancel = threading.Event()
        self.tokens = 0  # generated when the last text arrived
        self.generated = 0  # generated when the worker last emitted (it may be ahead of the queue's reader)
        self.tokens_at_cancel: int | None = None
        # Set on the worker thread once the prompt is tokenized, before anything is
        # emitted: read on the loop after the first item, it is already there.
        self.prompt_tokens: int | None = None
        # The ids of the prompt and the reply (Ollama's context), set on the worker
        # thread before the run ends, when the request asked for them.
        self.context: list[int] | None = None

    def emit(self, text: str, tokens: int) -> None:
        """Called on the worker thread."""
        self.generated = tokens
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (text, tokens))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel.set()
