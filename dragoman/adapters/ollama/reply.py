"""The replies ``/api/chat`` and ``/api/generate`` requests asked for
(:class:`adapters.reply.ReplyFormat`). Ollama streams unless told ``stream: false``."""

from __future__ import annotations

from dataclasses import dataclass

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.ollama import generate, wire
from dragoman.adapters.ollama.stream import StreamEncoder, render_response


@dataclass(frozen=True)
class ChatReply:
    model: str
    stream: bool = True

    @classmethod
    def asked_by(cls, request: wire.ChatRequest) -> ChatReply:
        return cls(request.model, stream=request.stream is not False)

    def stream_encoder(self) -> StreamEncoder:
        return StreamEncoder(self.model)

    def render(self, result: ChatResult) -> bytes:
        return render_response(result, self.model)


@dataclass(frozen=True)
class GenerateReply:
    model: str
    stream: bool = True

    @classmethod
    def asked_by(cls, request: wire.GenerateRequest) -> GenerateReply:
        return cls(request.model, stream=request.stream is not False)

    def stream_encoder(self) -> generate.GenerateEncoder:
        return generate.GenerateEncoder(self.model)

    def render(self, result: ChatResult) -> bytes:
        return generate.render_response(result, self.model)
