"""The reply a Messages request asked for (:class:`adapters.reply.ReplyFormat`)."""

from __future__ import annotations

from dataclasses import dataclass

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.anthropic import wire
from dragoman.adapters.anthropic.stream import StreamEncoder, render_response


@dataclass(frozen=True)
class MessageReply:
    model: str
    stream: bool = False

    @classmethod
    def asked_by(cls, request: wire.MessagesRequest) -> MessageReply:
        return cls(request.model, stream=bool(request.stream))

    def stream_encoder(self) -> StreamEncoder:
        return StreamEncoder(self.model)

    def render(self, result: ChatResult) -> bytes:
        return render_response(result, self.model)
