"""One HTTP exchange with an upstream: send, wait for the first bytes, read the rest.

Deadlines are event-loop times. Waits for the start of a reply get an
``asyncio.timeout_at``; reads of the body a :class:`ReadWatch`. Neither spans a
``yield`` (a timeout firing while the consumer holds the generator would cancel the
consumer instead). Transport errors are told apart by *when* they happen, not by
class: a server that closes the connection early can surface as several aiohttp
classes, so the class says little. aiohttp's own timeouts (only ``connect_timeout``
is set) are ``TimeoutError`` subclasses too; they are transport failures, caught
before our deadlines' ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import AsyncIterator, Callable, Mapping
from email.utils import parsedate_to_datetime

import aiohttp
from yarl import URL

from dragoman.adapters.errors import RETRY_AFTER_MAX, RETRY_AFTER_MIN, BackendError, DragomanError
from dragoman.backends.upstream.clients import NO_TIMEOUT
from dragoman.backends.upstream.endpoints import display_url
from dragoman.backends.upstream.watch import ReadWatch

# What a broken connection raises.
TRANSPORT_ERRORS = (aiohttp.ClientError, OSError)
ERROR_BODY_LIMIT = 64 * 1024
CHUNK_SIZE = 16 * 1024  # the most one read of a body returns

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


# 2xx statuses that cannot carry content (RFC 9110 15.3.5, 15.3.6): whatever body
# follows is not a reply, and relaying it as one answered a 205 with a 200.
NO_CONTENT_STATUSES = frozenset({204, 205})


class Reply:
    """An upstream reply whose status was 2xx and whose first bytes have arrived."""

    __slots__ = ("response", "chunks", "first")

    def __init__(self, response: aiohttp.ClientResponse, chunks: AsyncIterator[bytes], first: bytes) -> None:
        self.response = response
        self.chunks = chunks
        self.first = first

    def header(self, name: str) -> str:
        return header(self.response, name)

    async def aclose(self) -> None:
        await close_response(self.response)


def header(response: aiohttp.ClientResponse, name: str) -> str:
    """A header's value, repeated ones joined with ``, `` (as HTTP reads them); ``""``
    when absent."""
    values = response.headers.getall(name, ())
    return values[0] if len(values) == 1 else ", ".join(values)


async def close_response(response: aiohttp.ClientResponse) -> None:
    """Hands the connection back to the pool, or closes it when the body was not read
    to its end (a connection mid-reply cannot carry another request)."""
    response.release()
    await response.wait_for_close()


async def open_reply(
    client: aiohttp.ClientSession,
    url: URL | str,
    body: bytes,
    headers: Mapping[str, str],
    timeout: aiohttp.ClientTimeout,
    deadline: float,
    decode_error: ErrorDecoder,
    *,
    silence: str,
    upstream: str = "",
) -> Reply:
    """POST ``body`` to ``url`` and wait, until ``deadline``, for a 2xx status and the
    first body bytes. Raises :class:`Failed` for what another endpoint might not do (no
    connection, 5xx, a status that is no HTTP reply status, silence, a close before any
    byte) and the upstream's error for a 4xx. ``silence`` says which timeout the
    deadline came from, and ``upstream`` (the endpoint, without credentials) who
    answered, for the messages."""
    try:
        async with asyncio.timeout_at(deadline):
            response = await client.request(
                "POST", url, data=body, headers=headers, timeout=timeout, allow_redirects=False, compress=False
            )
            try:
                if not 200 <= response.status <= 299 or response.status in NO_CONTENT_STATUSES:
                    raise _status_error(response, await _read_capped(response), decode_error, upstream)
                _check_encoding(response, upstream)
                chunks = response.content.iter_chunked(CHUNK_SIZE)
                first = await anext(chunks, b"")
            except BaseException:
                await close_response(response)
                raise
    except aiohttp.ClientError as exc:  # before TimeoutError: aiohttp's connect timeout is one
        raise Failed(describe(exc)) from exc
    except TimeoutError:
        raise Failed(f"sent nothing within {silence}", timed_out=True) from None
    except OSError as exc:
        raise Failed(describe(exc)) from exc
    if not first:
        await close_response(response)
        raise Failed("closed the reply before sending a byte", responded=True)
    return Reply(response, chunks, first)


async def read_rest(
    reply: Reply, idle_timeout: float, total_deadline: float, *, max_bytes: int, upstream: str = ""
) -> bytes:
    """The rest of a whole (non-streaming) reply body; :class:`Failed` if it stalls or
    breaks, since nothing of it can have reached the client yet, and
    :class:`ReplyTooLarge` past ``max_bytes`` (checked as it arrives, not after)."""
    declared = reply.header("content-length")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ReplyTooLarge(f"upstream {upstream} announced a reply of {int(declared)} bytes; {_over(max_bytes)}")
    watch = ReadWatch(idle_timeout, total_deadline)
    pieces = [reply.first]
    size = len(reply.first)
    try:
        while (chunk := await watch.read(reply.chunks)) is not None:
            size += len(chunk)
            if size > max_bytes:
                raise ReplyTooLarge(f"upstream {upstream} sent a reply larger than {max_bytes} bytes; {_over(max_bytes)}")
            pieces.append(chunk)
    except aiohttp.ClientError as exc:
        raise Failed(f"connection lost mid-reply: {describe(exc)}", responded=True) from exc
    except TimeoutError:
        raise Failed(f"stopped sending mid-reply ({watch.expired})", timed_out=True, responded=True) from None
    except OSError as exc:
        raise Failed(f"connection lost mid-reply: {describe(exc)}", responded=True) from exc
    finally:
        watch.close()
    return b"".join(pieces)


async def get_json_body(
    client: aiohttp.ClientSession, url: str, headers: Mapping[str, str], timeout: float, *, max_bytes: int
) -> bytes:
    """A small GET (model lists): the body of a 2xx, at most ``max_bytes``, else
    ``BackendError``. ``url`` carries no credentials (they travel in ``headers``)."""
    try:
        async with asyncio.timeout(timeout):
            async with client.request("GET", url, headers=headers, timeout=NO_TIMEOUT, allow_redirects=False) as response:
                if not 200 <= response.status <= 299 or response.status in NO_CONTENT_STATUSES:
                    raise BackendError(f"GET {url}: HTTP {response.status}", status=502)
                body = bytearray()
                async for chunk in response.content.iter_chunked(CHUNK_SIZE):
                    body += chunk
                    if len(body) > max_bytes:
                        raise ReplyTooLarge(f"GET {url}: larger than {max_bytes} bytes; {_over(max_bytes)}")
    except aiohttp.ClientError as exc:
        raise BackendError(f"GET {url}: {describe(exc)}") from exc
    except TimeoutError:
        raise BackendError(f"GET {url}: no answer within {timeout:g}s") from None
    except OSError as exc:
        raise BackendError(f"GET {url}: {describe(exc)}") from exc
    return bytes(body)


def _status_error(response: aiohttp.ClientResponse, body: bytes, decode_error: ErrorDecoder, upstream: str) -> Exception:
    status = response.status
    if 300 <= status <= 399:
        where = display_url(header(response, "location") or "elsewhere")
        return BackendError(f"upstream {upstream} redirected to {where}; configure that URL instead")
    if status in NO_CONTENT_STATUSES:
        error: DragomanError = BackendError(f"upstream {upstream} answered HTTP {status}, which carries no reply", status=502)
        return Failed(f"HTTP {status}: no reply", error=error, responded=True)
    if not 400 <= status <= 599:  # 1xx, or no HTTP status at all (600 and up)
        error = BackendError(f"upstream {upstream} answered HTTP {status}, which is not a status a reply can have")
        return Failed(f"HTTP {status}: not a reply status", error=error, responded=True)
    error = decode_error(status, body)
    error.retry_after = retry_after(header(response, "retry-after"))
    if status >= 500:
        return Failed(f"HTTP {status}: {error.message}", error=error, responded=True)
    return error


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK_SIZE):
        body += chunk
        if len(body) >= ERROR_BODY_LIMIT:
            break
    return bytes(body[:ERROR_BODY_LIMIT])


def retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number, or an HTTP date), clamped to
    1 s – 1 h; None for anything else (``inf``, ``nan``, ``1e999``, garbage)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        seconds = (when - dt.datetime.now(dt.timezone.utc)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return float(min(max(seconds, RETRY_AFTER_MIN), RETRY_AFTER_MAX))


def _check_encoding(response: aiohttp.ClientResponse, upstream: str) -> None:
    """Bodies are asked for and read as ``identity``: a compressed one would be read
    as garbage (or, decompressed, could be a bomb), so it is refused by name."""
    encoding = header(response, "content-encoding").strip().lower()
    if encoding not in ("", "identity"):
        error = BackendError(
            f"upstream {upstream} sent its reply with Content-Encoding '{encoding}' although asked for identity"
        )
        raise Failed(f"Content-Encoding {encoding}", error=error, responded=True)


def _over(limit: int) -> str:
    return f"the limit is {limit} bytes (max_reply_bytes of the model entry)"


def describe(exc: BaseException) -> str:
    """A transport failure by class and message: ``ClientConnectorError: Cannot connect…``."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class LineTooLong(BackendError):
    """A stream line past ``max_line_bytes`` (502)."""


class ReplyTooLarge(BackendError):
    """A whole reply past ``max_reply_bytes`` (502)."""


class LineSplitter:
    """Splits body pieces into lines (SSE and NDJSON both end lines with ``\\n``).

    The unfinished line is kept as a list of pieces and joined once, when its end
    comes: a line spread over n chunks costs O(n), not the O(n²) of appending each
    chunk to it. A line longer than ``max_line`` raises :class:`LineTooLong` as soon
    as it is that long, without waiting for its end."""

    __slots__ = ("_pending", "_pending_size", "_max_line")

    def __init__(self, max_line: int | None = None) -> None:
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._max_line = max_line

    def lines(self, chunk: bytes) -> list[bytes]:
        parts = chunk.split(b"\n")
        rest = parts.pop()
        longest_possible = len(chunk)
        if self._pending:
            if not parts:  # the line goes on
                self._pending.append(rest)
                self._pending_size += len(rest)
                self._check(self._pending_size)
                return []
            self._pending.append(parts[0])
            parts[0] = b"".join(self._pending)
            longest_possible += self._pending_size
            self._pending = []
        # Only a chunk (with what was pending) longer than the limit can hold a line that is.
        if self._max_line is not None and longest_possible > self._max_line:
            self._check(max([len(rest), *map(len, parts)]))
        if rest:
            self._pending = [rest]
        self._pending_size = len(rest)
        return parts

    def tail(self) -> list[bytes]:
        rest = b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        return [rest] if rest.strip() else []

    def _check(self, size: int) -> None:
        if self._max_line is not None and size > self._max_line:
            raise LineTooLong(
                f"sent a stream line longer than {self._max_line} bytes (max_line_bytes of the model entry)"
            )


__all__ = [
    "ERROR_BODY_LIMIT",
    "TRANSPORT_ERRORS",
    "Failed",
    "LineSplitter",
    "LineTooLong",
    "ReplyTooLarge",
    "Reply",
    "close_response",
    "describe",
    "header",
    "get_json_body",
    "open_reply",
    "read_rest",
    "retry_after",
]
