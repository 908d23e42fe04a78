"""The reply a chat completion request asked for (:class:`adapters.reply.ReplyFormat`)."""

from __future__ import annotations

from dataclasses import dataclass

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.openai import wire
from dragoman.adapters.openai.stream import StreamEncoder, render_response


@dataclass(frozen=True)
class ChatReply:
    model: str
    stream: bool = False
    include_usage: bool = False

    @classmethod
    def asked_by(cls, request: wire.ChatCompletionRequest) -> ChatReply:
        usage = bool(request.stream_options and request.stream_options.include_usage)
        return cls(request.model, stream=bool(request.stream), include_usage=usage)

    def stream_encoder(self) -> StreamEncoder:
        return StreamEncoder(self.model, include_usage=self.include_usage)

    def render(self, result: ChatResult) -> bytes:
        return render_response(result, self.model)
