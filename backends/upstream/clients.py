"""One pooled HTTP client per upstream server, shared by every model entry that uses it.

The client speaks httpx's API over aiohttp's connection pool (``httpx-aiohttp``):
httpx's own pool loses about 3× of the throughput at 32 concurrent streams, the
aiohttp one keeps it. Clients are per event loop (a client's connections belong to the
loop that opened them) and reference-counted, so the last entry to close closes it.
"""

from __future__ import annotations

import asyncio
from http.cookiejar import CookieJar, DefaultCookiePolicy
from urllib.parse import urlsplit

import aiohttp
import httpx
from httpx_aiohttp import HttpxAiohttpClient
from httpx_aiohttp.transport import AiohttpTransport

# Below the 5 s that uvicorn (vLLM), llama-server and most proxies wait before closing
# an idle connection, so a request is never sent on a socket the server is closing.
KEEPALIVE_EXPIRY = 4.0

_Key = tuple[asyncio.AbstractEventLoop, str, int]


class _Shared:
    __slots__ = ("client", "users")

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.users = 0


_shared: dict[_Key, _Shared] = {}


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: what one connection pool serves."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}".lower()


def new_client(max_connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )

    def session() -> aiohttp.ClientSession:
        # A shared client must not carry one caller's upstream cookies into another's
        # request: neither aiohttp nor httpx may keep any.
        connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=KEEPALIVE_EXPIRY)
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    # No client-wide timeout: each request carries its own (see exchange.py).
    return HttpxAiohttpClient(
        transport=AiohttpTransport(limits=limits, client=session),
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        timeout=None,
        follow_redirects=False,
    )


class ClientLease:
    """The clients one backend uses, taken from the shared table on first use in a loop
    and handed back by :meth:`aclose`."""

    def __init__(self, max_connections: int) -> None:
        self._max_connections = max_connections
        self._held: dict[_Key, httpx.AsyncClient] = {}

    def client_for(self, url: str) -> httpx.AsyncClient:
        key = (asyncio.get_running_loop(), origin(url), self._max_connections)
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
                    await shared.client.aclose()


def shared_client_count() -> int:
    """How many upstream clients are open (for tests of sharing and closing)."""
    return len(_shared)


__all__ = ["ClientLease", "new_client", "origin", "shared_client_count"]
