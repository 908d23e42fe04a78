"""The reply a Responses request asked for (:class:`adapters.reply.ReplyFormat`); the
response object itself too, which the route stores before it leaves."""

from __future__ import annotations

from dataclasses import dataclass

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.meta import ResponseMeta
from dragoman.adapters.responses.stream import StreamEncoder, build_response, encode_response


@dataclass(frozen=True)
class ResponseReply:
    meta: ResponseMeta
    stream: bool = False

    def stream_encoder(self) -> StreamEncoder:
        return StreamEncoder(self.meta)

    def response(self, result: ChatResult) -> wire.Response:
        return build_response(result, self.meta)

    def render(self, result: ChatResult) -> bytes:
        return encode_response(self.response(result))
