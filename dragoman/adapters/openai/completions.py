"""OpenAI's legacy ``/v1/completions`` ⇄ canonical completion requests and events.

A prompt here is raw (api-mapping §7): the model's whole input, special tokens kept
special; a ``suffix`` makes it fill-in-the-middle. A list of prompts is one canonical
request per prompt and one choice each (``index`` set), answered in turn. Logprobs
are the legacy shape: ``tokens``, ``token_logprobs``, ``top_logprobs`` (token →
logprob maps) and ``text_offset`` (where each token starts in the choice's text).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import (
    CompletionRequest,
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    TokenLogprob,
    Usage,
)
from dragoman.adapters.errors import DragomanError, RequestError, UnsupportedFeature, error_for_status
from dragoman.adapters.logit_bias import parse_logit_bias
from dragoman.adapters.openai import completion_wire as wire
from dragoman.adapters.openai.convert import keep_alive_seconds, sampling_options
from dragoman.adapters.openai.ids import SYSTEM_FINGERPRINT, new_text_completion_id
from dragoman.adapters.openai.stream import DONE_FRAME, KEEPALIVE_FRAME, SSE_MEDIA_TYPE, finite_logprob, render_error, usage_stats
from dragoman.adapters.openai.wire import UsageStats

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's, when max_tokens is not sent

_encoder = msgspec.json.Encoder()


# -- client request → canonical ---------------------------------------------------------


def to_canonical(request: wire.CompletionRequest) -> list[CompletionRequest]:
    """One canonical request per prompt, in the order of the choices."""
    _refuse_unsupported(request)
    options = sampling_options(request, DEFAULT_MAX_TOKENS if request.max_tokens is None else request.max_tokens)
    bias = parse_logit_bias(request.logit_bias)
    return [
        CompletionRequest(
            model=request.model,
            prompt=prompt,
            suffix=request.suffix or None,
            raw=True,
            options=options,
            logprobs=request.logprobs is not None,
            top_logprobs=request.logprobs or 0,
            logit_bias=bias,
            stream=bool(request.stream),
            keep_alive=keep_alive_seconds(request.keep_alive),
        )
        for prompt in prompts(request.prompt)
    ]


def prompts(prompt: str | list[Any]) -> list[str]:
    """The text prompts; token-id prompts and empty ones are refused by name."""
    texts = [prompt] if isinstance(prompt, str) else prompt
    if not texts:
        raise RequestError("prompt: must not be an empty list", param="prompt")
    for i, text in enumerate(texts):
        param = "prompt" if isinstance(prompt, str) else f"prompt[{i}]"
        if not isinstance(text, str):
            raise UnsupportedFeature(f"{param}: token-id prompts are not supported; send the prompt as text", param=param)
        if not text:
            raise RequestError(f"{param}: must not be empty", param=param)
    return texts  # type: ignore[return-value]


def _refuse_unsupported(request: wire.CompletionRequest) -> None:
    if request.n is not None and request.n != 1:
        raise UnsupportedFeature(f"n: only one choice per prompt is supported (n=1), got {request.n}", param="n")
    if request.best_of is not None and request.best_of != 1:
        message = f"best_of: only one candidate per prompt is generated (best_of=1), got {request.best_of}"
        raise UnsupportedFeature(message, param="best_of")
    if request.echo and request.logprobs is not None:
        message = "echo: the prompt's own logprobs are not computed, so echo cannot be combined with logprobs"
        raise UnsupportedFeature(message, param="echo")


# -- canonical events → client SSE ------------------------------------------------------


class CompletionStream:
    """The SSE frames of one reply: shared id and ``created``, usage summed over the
    choices (one usage chunk at the end when asked), ``data: [DONE]`` last. Each
    choice is encoded by the :class:`ChoiceEncoder` that :meth:`choice` returns."""

    media_type = SSE_MEDIA_TYPE

    def __init__(self, model: str, *, include_usage: bool = False, top_logprobs: int | None = None) -> None:
        self.model = model
        self.include_usage = include_usage
        self.top_logprobs = top_logprobs  # None: no logprobs asked
        self.id = new_text_completion_id()
        self.created = int(time.time())
        self.usage = Usage()
        self.failed = False

    def choice(self, index: int, echo: str = "") -> ChoiceEncoder:
        return ChoiceEncoder(self, index, echo)

    def error(self, err: DragomanError) -> bytes:
        self.failed = True
        return b"data: " + render_error(err) + b"\n\n"

    def close(self) -> bytes:
        if self.include_usage and not self.failed:
            return self.frame([], usage=usage_stats(self.usage)) + DONE_FRAME
        return DONE_FRAME

    def frame(self, choices: list[wire.CompletionChoice], usage: UsageStats | None = None) -> bytes:
        chunk = wire.Completion(
            id=self.id,
            object="text_completion",
            created=self.created,
            model=self.model,
            system_fingerprint=SYSTEM_FINGERPRINT,
            choices=choices,
            usage=usage,
        )
        return b"data: " + _encoder.encode(chunk) + b"\n\n"


class ChoiceEncoder:
    """One choice's events as chunks (the ``StreamEncoder`` protocol of proxy.chat);
    ``close`` is the whole stream's, so it writes nothing here."""

    media_type = SSE_MEDIA_TYPE

    def __init__(self, stream: CompletionStream, index: int, echo: str) -> None:
        self._stream = stream
        self._index = index
        self._echo = echo  # the prompt, sent first when the client asked for echo
        self._offset = 0

    def encode(self, event: Event) -> bytes:
        head = self._text(self._echo, None) if self._echo else b""
        self._echo = ""
        if isinstance(event, ContentDelta):
            return head + (self._text(event.text, event.logprobs) if event.text or event.logprobs else b"")
        if isinstance(event, Logprobs):
            return head + self._text("", event.tokens)
        if isinstance(event, Finish):
            stream = self._stream
            stream.usage = stream.usage + event.usage
            return head + self._chunk("", None, finish_reason(event.reason))
        if isinstance(event, ErrorEvent):
            return head + self.error(error_for_status(event.status, event.message, retry_after=event.retry_after))
        # Thinking and tool calls have no field here: raw prompts run no output parser.
        return head

    def error(self, err: DragomanError) -> bytes:
        return self._stream.error(err)

    def close(self) -> bytes:
        return b""

    def keepalive(self) -> bytes:
        return KEEPALIVE_FRAME

    def _text(self, text: str, tokens: list[TokenLogprob] | None) -> bytes:
        logprobs = None
        if self._stream.top_logprobs is not None:  # offsets run on over the chunks
            logprobs, self._offset = legacy_logprobs(tokens or [], self._offset, top=self._stream.top_logprobs > 0)
        return self._chunk(text, logprobs, None)

    def _chunk(self, text: str, logprobs: wire.CompletionLogprobs | None, reason: Any) -> bytes:
        return self._stream.frame([wire.CompletionChoice(index=self._index, text=text, logprobs=logprobs, finish_reason=reason)])


def legacy_logprobs(tokens: list[TokenLogprob], offset: int, *, top: bool) -> tuple[wire.CompletionLogprobs, int]:
    """The legacy logprobs of ``tokens`` whose text starts at ``offset`` in the
    choice's text, and the offset after them."""
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token.token)
    logprobs = wire.CompletionLogprobs(
        tokens=[t.token for t in tokens],
        token_logprobs=[finite_logprob(t.logprob) for t in tokens],
        top_logprobs=[{a.token: finite_logprob(a.logprob) for a in t.top_logprobs} for t in tokens] if top else None,
        text_offset=offsets,
    )
    return logprobs, offset


def finish_reason(reason: FinishReason) -> str:
    return "length" if reason == "length" else "stop"


# -- whole replies ------------------------------------------------------------------------


def render_response(results: list[ChatResult], model: str, *, echoes: list[str], top_logprobs: int | None) -> bytes:
    """The ``text_completion`` body: one choice per prompt, usage summed."""
    choices = []
    for index, (result, echo) in enumerate(zip(results, echoes, strict=True)):
        logprobs = None
        if top_logprobs is not None:
            logprobs, _ = legacy_logprobs(result.logprobs or [], len(echo), top=top_logprobs > 0)
        text = echo + result.content
        choices.append(wire.CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish_reason(result.finish_reason)))  # type: ignore[arg-type]
    usage = sum((r.usage for r in results), Usage())
    reply = wire.Completion(
        id=new_text_completion_id(),
        object="text_completion",
        created=int(time.time()),
        model=model,
        system_fingerprint=SYSTEM_FINGERPRINT,
        choices=choices,
        usage=usage_stats(usage),
    )
    return _encoder.encode(reply)


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ChoiceEncoder",
    "CompletionStream",
    "legacy_logprobs",
    "prompts",
    "render_response",
    "to_canonical",
]
