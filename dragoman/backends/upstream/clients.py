"""One pooled HTTP client per upstream server, shared by every model entry that uses it.

The client is an ``aiohttp.ClientSession`` used directly. httpx over the same pool
(``httpx-aiohttp``) cost 90 µs more CPU per proxied request (building and merging its
``Headers``, its cookie pass, its response objects, one exception-mapping layer per
read): about a fifth of the whole request. Clients are per event loop (a client's
connections belong to the loop that opened them) and reference-counted, so the last
entry to close closes it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import aiohttp

# Below the 5 s that uvicorn (vLLM), llama-server and most proxies wait before closing
# an idle connection, so a request is never sent on a socket the server is closing.
KEEPALIVE_EXPIRY = 4.0

# No client-wide timeout: each request carries its own (see exchange.py).
NO_TIMEOUT = aiohttp.ClientTimeout()

_Key = tuple[asyncio.AbstractEventLoop, str, int]


class _Shared:
    __slots__ = ("client", "users")

    def __init__(self, client: aiohttp.ClientSession) -> None:
        self.client = client
        self.users = 0


_shared: dict[_Key, _Shared] = {}


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: what one connection pool serves."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}".lower()


def new_client(max_connections: int) -> aiohttp.ClientSession:
    """A pooled client that follows no redirects (each request says so), decodes no
    bodies (they are read raw and asked for as ``identity``), reads no proxy settings
    from the environment, and keeps no cookies: a shared client must not carry one
    caller's upstream cookies into another's request."""
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=KEEPALIVE_EXPIRY)
    return aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False, trust_env=False,
        timeout=NO_TIMEOUT,
    )  # fmt: skip


class ClientLease:
    """The clients one backend uses, taken from the shared table on first use in a loop
    and handed back by :meth:`aclose`."""

    def __init__(self, max_connections: int) -> None:
        self._max_connections = max_connections
        self._held: dict[_Key, aiohttp.ClientSession] = {}
        self._origins: dict[str, str] = {}  # endpoint URL -> origin, split once

    def client_for(self, url: str) -> aiohttp.ClientSession:
        where = self._origins.get(url)
        if where is None:
            where = self._origins[url] = origin(url)
        key = (asyncio.get_running_loop(), where, self._max_connections)
        client = self._held.get(key)
        if client is not None:
            return client
        shared = _shared.get(key)
        if shared is None:
            shared = _shared[key] = _Shared(new_client(self._max_connections))
        shared.users += 1
        self._held[key] = shared.client
        return shared.client

    async def aclose(self) -> None:
        held, self._held = self._held, {}
        for key in held:
            shared = _shared.get(key)
            if shared is None:
                continue
            shared.users -= 1
            if shared.users <= 0:
                del _shared[key]
                # A client can only be closed on the loop its connections belong to.
                if key[0] is asyncio.get_running_loop():
                    await shared.client.close()


def shared_client_count() -> int:
    """How many upstream clients are open (for tests of sharing and closing)."""
    return len(_shared)


__all__ = ["NO_TIMEOUT", "ClientLease", "new_client", "origin", "shared_client_count"]
