"""Ollama ``/api/generate`` ⇄ the canonical completion request, and its NDJSON reply.

Client side: :func:`to_canonical` reads what a native client sent; :class:`GenerateEncoder`
and :func:`render_response` write the reply (``response`` and ``thinking`` text; counts
and nanosecond durations on the final object). Upstream side: :func:`to_upstream` writes
the body for an Ollama server and :class:`UpstreamGenerateDecoder` reads its lines. The
line framing, ``created_at`` and logprobs are :mod:`adapters.ollama.stream`'s, shared
with ``/api/chat``.
"""

from __future__ import annotations

import base64
from typing import Literal

import msgspec

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import CompletionRequest, Finish
from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.adapters.images import decode_base64_image
from dragoman.adapters.reply import ModelReply
from dragoman.adapters.ollama import wire
from dragoman.adapters.ollama.convert import (
    keep_alive_seconds,
    parse_format,
    parse_think,
    sampling_options,
    wire_format,
    wire_options,
    wire_seconds,
    wire_think,
)
from dragoman.adapters.ollama.stream import (
    StreamEncoder,
    created_at,
    done_reason,
    numbered_call,
    wire_logprobs,
)
from dragoman.adapters.ollama.upstream_reply import UpstreamStreamDecoder

_encoder = msgspec.json.Encoder()
_reply_decoder = msgspec.json.Decoder(wire.UpstreamGenerateResponse)


# -- client request → canonical ---------------------------------------------------------


def to_canonical(request: wire.GenerateRequest) -> CompletionRequest:
    """The canonical completion for a native client's ``/api/generate``. An empty
    ``prompt`` is the route's load/unload, handled before this."""
    if request.template:
        raise UnsupportedFeature(
            "template: dragoman does not render Go templates; send the rendered prompt with raw: true, "
            "or leave template out to use the model's own",
            param="template",
        )
    suffix = request.suffix or None  # "" is "no suffix", as in Go
    if request.system and (request.raw or suffix is not None):
        kind = "a fill-in-the-middle request (suffix)" if suffix is not None else "raw mode"
        raise RequestError(f"system: {kind} has no system prompt; put it in the prompt", param="system")
    think, think_level = parse_think(request.think)
    return CompletionRequest(
        model=request.model,
        prompt=request.prompt or "",
        suffix=suffix,
        raw=bool(request.raw),
        system=request.system or None,
        images=[decode_base64_image(image, f"images[{i}]") for i, image in enumerate(request.images or [])],
        options=sampling_options(request.options),
        response_format=parse_format(request.format),
        think=think,
        think_level=think_level,
        logprobs=bool(request.logprobs),
        top_logprobs=request.top_logprobs or 0,
        stream=bool(request.stream),
        keep_alive=keep_alive_seconds(request.keep_alive),
        # Raw mode has no token memory, either way, as in Ollama.
        context=None if request.raw else request.context or None,
        return_context=not request.raw,
    )


# -- canonical → upstream Ollama request ------------------------------------------------


class _UpstreamGenerateRequest(wire.GenerateRequest, kw_only=True):
    stream: bool  # always written, even when true (the default)


def to_upstream(request: CompletionRequest, model: str) -> bytes:
    """The ``/api/generate`` body for an Ollama server that knows the model as ``model``.

    A suffix goes with ``raw: false``: Ollama renders it into its template's FIM
    frame only then (in raw mode it would drop the suffix without a word)."""
    return _encoder.encode(
        _UpstreamGenerateRequest(
            model=model,
            prompt=request.prompt,
            suffix=request.suffix or "",
            system=request.system or "",
            raw=request.raw and request.suffix is None,
            images=[base64.b64encode(image.data).decode("ascii") for image in request.images] or None,
            format=wire_format(request.response_format),
            stream=request.stream,
            think=wire_think(request),
            keep_alive=wire_seconds(request.keep_alive),
            options=wire_options(request.options),
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs,
            context=request.context,
        )
    )


# -- canonical events → client NDJSON ---------------------------------------------------


class GenerateEncoder(StreamEncoder):
    """``/api/chat``'s encoder with ``/api/generate``'s line: ``response`` for text."""

    def _chunk(
        self,
        *,
        content: str = "",
        thinking: str | None = None,
        tool_calls: list[wire.ToolCall] | None = None,
        logprobs: list[wire.Logprob] | None = None,
    ) -> msgspec.Struct:
        return wire.GenerateResponse(
            model=self._model,
            created_at=created_at(),
            response=content,
            done=False,
            thinking=thinking,
            tool_calls=tool_calls,
            logprobs=logprobs,
        )

    def _last(self, event: Finish) -> msgspec.Struct:
        return _final(self._model, "", None, event)


def _final(model: str, response: str, thinking: str | None, finish: Finish, **extra: object) -> wire.GenerateResponse:
    reply = wire.GenerateResponse(
        model=model,
        created_at=created_at(),
        response=response,
        done=True,
        thinking=thinking,
        done_reason=done_reason(finish.reason),
        context=finish.context,
        **extra,  # type: ignore[arg-type]
    )
    return wire.with_counts(reply, finish.usage, finish.timings)


def reply_for(request: wire.GenerateRequest) -> ModelReply[GenerateEncoder]:
    """The reply the request asked for: NDJSON lines unless ``stream`` is false."""
    return ModelReply(request.model, request.stream is not False, GenerateEncoder, render_response)


def render_response(result: ChatResult, model: str) -> bytes:
    """The non-streaming ``/api/generate`` reply."""
    finish = Finish(reason=result.finish_reason, usage=result.usage, timings=result.timings, context=result.context)
    calls = [numbered_call(c, i) for i, c in enumerate(result.tool_calls)] or None
    logprobs = wire_logprobs(result.logprobs) if result.logprobs else None
    return _encoder.encode(
        _final(model, result.content, result.thinking or None, finish, tool_calls=calls, logprobs=logprobs)
    )


def render_load_response(model: str, reason: Literal["load", "unload"]) -> bytes:
    """The reply to an empty ``prompt``: the model was loaded (or, keep_alive 0, unloaded)."""
    reply = wire.GenerateResponse(model=model, created_at=created_at(), response="", done=True, done_reason=reason)
    return _encoder.encode(reply)


# -- upstream NDJSON → canonical events ---------------------------------------------------


class UpstreamGenerateDecoder(UpstreamStreamDecoder):
    """Reads an Ollama server's ``/api/generate`` lines as ``/api/chat`` lines."""

    def decode(self, body: bytes) -> wire.UpstreamChatResponse:
        reply = _reply_decoder.decode(body)
        fields = msgspec.structs.asdict(reply)
        text, thinking, calls = fields.pop("response"), fields.pop("thinking"), fields.pop("tool_calls")
        message = wire.ChatMessage(role="assistant", content=text, thinking=thinking, tool_calls=calls)
        return wire.UpstreamChatResponse(message=message, **fields)


__all__ = [
    "GenerateEncoder",
    "UpstreamGenerateDecoder",
    "render_load_response",
    "render_response",
    "to_canonical",
    "to_upstream",
]
