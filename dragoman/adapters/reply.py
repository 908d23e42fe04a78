"""How a dialect writes the answer to one request, streamed or whole.

A chat route hands the proxy's one skeleton (:func:`dragoman.proxy.chat.answer`) a
:class:`ReplyFormat` its adapter built from the client's request: whether the client
asked for a stream, the encoder that turns canonical events into its frames, and the
renderer that turns the aggregate of the same events into one body.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import Event
from dragoman.adapters.errors import DragomanError


class StreamEncoder(Protocol):
    """Canonical events in, one dialect's frames out: each ``encode`` call may return
    b"" (an event the dialect does not show), ``error`` ends a stream that already
    began, ``close`` writes the terminator."""

    media_type: str

    def encode(self, event: Event) -> bytes: ...

    def error(self, err: DragomanError) -> bytes: ...

    def close(self) -> bytes: ...


E = TypeVar("E", bound=StreamEncoder, covariant=True)


class ReplyFormat(Protocol[E]):
    """The reply one request asked for."""

    @property
    def stream(self) -> bool: ...

    def stream_encoder(self) -> E: ...

    def render(self, result: ChatResult) -> bytes: ...


@dataclass(frozen=True)
class ModelReply(Generic[E]):
    """A reply written by an encoder and a renderer that take the model's name (every
    dialect but Responses, whose reply carries the whole request's echo)."""

    model: str
    stream: bool
    encoder: Callable[[str], E]
    renderer: Callable[[ChatResult, str], bytes]

    def stream_encoder(self) -> E:
        return self.encoder(self.model)

    def render(self, result: ChatResult) -> bytes:
        return self.renderer(result, self.model)
