"""One HTTP exchange with an upstream: send, wait for the first bytes, read the rest.

Deadlines are event-loop times. Waits for the start of a reply get an
``asyncio.timeout_at``; reads of the body a :class:`ReadWatch`. Neither spans a
``yield`` (a timeout firing while the consumer holds the generator would cancel the
consumer instead). Transport errors are told apart by
*when* they happen, not by class: the aiohttp transport maps a server disconnect to
``httpx.ConnectTimeout``, so the class says little.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime

import aiohttp
import httpx

from adapters.errors import BackendError, DragomanError
from backends.upstream.watch import ReadWatch

# What a broken connection raises, whichever transport httpx runs on.
TRANSPORT_ERRORS = (httpx.RequestError, aiohttp.ClientError, OSError)
ERROR_BODY_LIMIT = 64 * 1024

ErrorDecoder = Callable[[int, bytes], DragomanError]


class Failed(Exception):
    """An endpoint failed before answering anything; another may be tried.

    ``error`` is the upstream's own answer when it gave one (a 5xx), which the client
    gets if no endpoint does better; ``timed_out`` marks a first-byte timeout.
    """

    def __init__(
        self, reason: str, *, error: DragomanError | None = None, timed_out: bool = False, responded: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error
        self.timed_out = timed_out
        self.responded = responded  # a status line came: the server is up


class Reply:
    """An upstream reply whose status was 2xx and whose first bytes have arrived."""

    __slots__ = ("response", "chunks", "first")

    def __init__(self, response: httpx.Response, chunks: AsyncIterator[bytes], first: bytes) -> None:
        self.response = response
        self.chunks = chunks
        self.first = first


async def open_reply(
    client: httpx.AsyncClient,
    request: httpx.Request,
    deadline: float,
    decode_error: ErrorDecoder,
    *,
    silence: str,
) -> Reply:
    """Send ``request`` and wait, until ``deadline``, for a 2xx status and the first body
    bytes. Raises :class:`Failed` for what another endpoint might not do (no connection,
    5xx, silence, a close before any byte) and the upstream's error for a 4xx.
    ``silence`` says which timeout the deadline came from, for the message."""
    try:
        async with asyncio.timeout_at(deadline):
            response = await client.send(request, stream=True)
            try:
                if response.status_code >= 300:
                    raise _status_error(response, await _read_capped(response), decode_error)
                # The transport's stream itself: aiter_raw() adds a generator per chunk.
                chunks = aiter(response.stream)  # type: ignore[arg-type]
                first = await anext(chunks, b"")
            except BaseException:
                await response.aclose()
                raise
    except TimeoutError:
        raise Failed(f"sent nothing within {silence}", timed_out=True) from None
    except TRANSPORT_ERRORS as exc:
        raise Failed(describe(exc)) from exc
    if not first:
        await response.aclose()
        raise Failed("closed the reply before sending a byte", responded=True)
    return Reply(response, chunks, first)


async def read_rest(reply: Reply, idle_timeout: float, total_deadline: float) -> bytes:
    """The rest of a whole (non-streaming) reply body; :class:`Failed` if it stalls or
    breaks, since nothing of it can have reached the client yet."""
    watch = ReadWatch(idle_timeout, total_deadline)
    pieces = [reply.first]
    try:
        while (chunk := await watch.read(reply.chunks)) is not None:
            pieces.append(chunk)
    except TimeoutError:
        raise Failed(f"stopped sending mid-reply ({watch.expired})", timed_out=True, responded=True) from None
    except TRANSPORT_ERRORS as exc:
        raise Failed(f"connection lost mid-reply: {describe(exc)}", responded=True) from exc
    finally:
        watch.close()
    return b"".join(pieces)


async def get_json_body(client: httpx.AsyncClient, url: str, headers: dict[str, str], timeout: float) -> bytes:
    """A small GET (model lists): the body of a 2xx, else ``BackendError``."""
    try:
        async with asyncio.timeout(timeout):
            response = await client.get(url, headers=headers)
    except TimeoutError:
        raise BackendError(f"GET {url}: no answer within {timeout:g}s") from None
    except TRANSPORT_ERRORS as exc:
        raise BackendError(f"GET {url}: {describe(exc)}") from exc
    if response.status_code >= 300:
        raise BackendError(f"GET {url}: HTTP {response.status_code}", status=502)
    return response.content


def _status_error(response: httpx.Response, body: bytes, decode_error: ErrorDecoder) -> Exception:
    status = response.status_code
    if status < 400:
        where = response.headers.get("location", "elsewhere")
        return BackendError(f"upstream redirected to {where}; configure that URL instead")
    error = decode_error(status, body)
    error.retry_after = retry_after(response.headers.get("retry-after"))
    if status >= 500:
        return Failed(f"HTTP {status}: {error.message}", error=error, responded=True)
    return error


async def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= ERROR_BODY_LIMIT:
            break
    return bytes(body[:ERROR_BODY_LIMIT])


def retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0.0, (when - dt.datetime.now(dt.timezone.utc)).total_seconds())


def describe(exc: BaseException) -> str:
    """The original failure under httpx's wrapping: ``ClientConnectorError: Cannot connect…``."""
    root = exc
    while isinstance(root, httpx.HTTPError) and root.__cause__ is not None:
        root = root.__cause__
    return f"{type(root).__name__}: {root}" if str(root) else type(root).__name__


class LineSplitter:
    """Splits body pieces into lines (SSE and NDJSON both end lines with ``\\n``)."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = b""

    def lines(self, chunk: bytes) -> list[bytes]:
        if self._rest:
            chunk = self._rest + chunk
        parts = chunk.split(b"\n")
        self._rest = parts.pop()
        return parts

    def tail(self) -> list[bytes]:
        rest, self._rest = self._rest, b""
        return [rest] if rest.strip() else []


__all__ = [
    "ERROR_BODY_LIMIT",
    "TRANSPORT_ERRORS",
    "Failed",
    "LineSplitter",
    "Reply",
    "describe",
    "get_json_body",
    "open_reply",
    "read_rest",
    "retry_after",
]
