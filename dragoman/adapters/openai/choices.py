"""OpenAI's ``n``: several independent choices of one chat request.

Each choice is its own canonical request (a copy of the one the client sent), so every
backend serves ``n`` without knowing it, and a batch engine that admits the copies
together decodes them together. Their events are merged here into one reply: one id,
``index`` 0…n-1 on each choice's chunks, the usage of all choices (the prompt once,
as OpenAI counts it) at the end.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.canonical import ChatRequest, Event, Finish, Usage
from dragoman.adapters.errors import DragomanError, RequestError
from dragoman.adapters.openai.stream import SSE_MEDIA_TYPE, StreamEncoder


def choice_count(n: int | None, limit: int) -> int:
    """How many choices the client asked for, within ``server.limits.max_choices``."""
    if n is None:
        return 1
    if n < 1:
        raise RequestError(f"n: must be at least 1, got {n}", param="n")
    if n > limit:
        raise RequestError(
            f"n: {n} choices in one request; the limit is {limit} (server.limits.max_choices); "
            "ask for fewer, or send several requests",
            param="n",
        )
    return n


def choice_requests(request: ChatRequest, n: int) -> list[ChatRequest]:
    """One request per choice. With a seed, choice ``i`` samples with ``seed + i``:
    the choices differ, and the same request gives the same choices again."""
    seed = request.options.seed
    if seed is None or seed < 0:  # a negative seed is "random", as Ollama's -1
        return [request] * n
    return [
        msgspec.structs.replace(request, options=msgspec.structs.replace(request.options, seed=seed + i))
        for i in range(n)
    ]


def choices_usage(usages: list[Usage]) -> Usage:
    """The usage of all choices: one prompt (the same one, read once as far as the
    client is concerned) and every choice's completion tokens."""
    if not usages:
        return Usage()
    first = usages[0]
    return Usage(
        prompt_tokens=first.prompt_tokens,
        completion_tokens=sum(u.completion_tokens for u in usages),
        cached_tokens=first.cached_tokens,
        cache_write_tokens=first.cache_write_tokens,
    )


class ChoicesEncoder:
    """The SSE frames of ``n`` choices whose events arrive interleaved."""

    media_type = SSE_MEDIA_TYPE

    def __init__(self, model: str, n: int, *, include_usage: bool = False) -> None:
        first = StreamEncoder(model)
        self._choices = [first] + [StreamEncoder(model, index=i, id=first.id, created=first.created) for i in range(1, n)]
        self._usages: list[Usage | None] = [None] * n
        self.include_usage = include_usage

    def encode(self, index: int, event: Event) -> bytes:
        if isinstance(event, Finish):
            self._usages[index] = event.usage
        return self._choices[index].encode(event)

    @property
    def usage(self) -> Usage:
        return choices_usage([u for u in self._usages if u is not None])

    def error(self, err: DragomanError) -> bytes:
        return self._choices[0].error(err)

    def keepalive(self) -> bytes:
        return self._choices[0].keepalive()

    def close(self) -> bytes:
        """The usage chunk when asked and every choice finished, then ``[DONE]``."""
        finished = all(u is not None for u in self._usages)
        head = self._choices[0].usage_frame(self.usage) if self.include_usage and finished else b""
        return head + self._choices[0].close()


__all__ = ["ChoicesEncoder", "choice_count", "choice_requests", "choices_usage"]
