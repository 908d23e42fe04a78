"""Keep-alive frames on a stream that has gone quiet (``server.stream_keepalive``).

A long prompt's prefill sends nothing for as long as it takes; proxies and clients with
idle timeouts then drop a connection that is working. While no frame has gone out for
the interval, the encoder's keep-alive frame does (an SSE comment on OpenAI's streams,
``event: ping`` on Anthropic's). The frames are pulled by a task of their own into a
one-frame queue, and only the wait on that queue times out: a timeout never reaches
the generation the stream is waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol, runtime_checkable

_END = b""  # the pump's last item (encoders never yield an empty frame)


@runtime_checkable
class KeepAlive(Protocol):
    """An encoder whose dialect has a frame that means nothing but "still here"."""

    def keepalive(self) -> bytes: ...


async def with_keepalive(frames: AsyncIterator[bytes], interval: float, beat: bytes) -> AsyncIterator[bytes]:
    """``frames``, with ``beat`` after every ``interval`` seconds without one. A frame
    costs a queue's put and get; the one timer is the watchdog's, once an interval."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(maxsize=1)
    last_sent = loop.time()

    async def pump() -> None:
        try:
            async for frame in frames:
                if frame:
                    await queue.put(frame)
        except Exception as exc:  # handed to the reader, raised there
            await queue.put(exc)
            return
        await queue.put(_END)

    async def watchdog() -> None:
        while True:
            await asyncio.sleep(max(last_sent + interval - loop.time(), 0.0))
            if loop.time() - last_sent >= interval and queue.empty():
                queue.put_nowait(beat)
                await asyncio.sleep(interval)  # the beat counts as the last frame

    tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(watchdog())]
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                return
            last_sent = loop.time()
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if isinstance(frames, AsyncGenerator):
            await frames.aclose()
