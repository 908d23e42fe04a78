"""Keep-alive frames on a stream that has gone quiet (``server.stream_keepalive``).

A long prompt's prefill sends nothing for as long as it takes; proxies and clients with
idle timeouts then drop a connection that is working. While no frame has gone out for
the interval, the encoder's keep-alive frame does (an SSE comment on OpenAI's streams,
``event: ping`` on Anthropic's). The frames are pulled by a task, never cancelled on a
timeout: cancelling would end the generation the stream is waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol, runtime_checkable


@runtime_checkable
class KeepAlive(Protocol):
    """An encoder whose dialect has a frame that means nothing but "still here"."""

    def keepalive(self) -> bytes: ...


async def with_keepalive(frames: AsyncIterator[bytes], interval: float, beat: bytes) -> AsyncIterator[bytes]:
    """``frames``, with ``beat`` after every ``interval`` seconds without one."""
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(frames))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield beat
                continue
            try:
                frame = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield frame
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        if isinstance(frames, AsyncGenerator):
            await frames.aclose()
