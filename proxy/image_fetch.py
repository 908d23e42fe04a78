"""Fetching http(s) image URLs named by clients — off unless configured.

A client-named URL fetched by the server is a server-side request forgery risk, so:
only hosts on the allow-list (when one is set), never loopback, link-local, private or
otherwise special addresses unless the host is listed explicitly, a size cap enforced
while reading, a time cap, and no redirects (a redirect could lead anywhere).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
from urllib.parse import urlsplit

import httpx

from adapters.errors import RequestError
from adapters.images import sniff_image_mime
from config.schema import ImageFetch


async def fetch_as_data_uris(urls: list[str], settings: ImageFetch) -> dict[str, str]:
    async with httpx.AsyncClient(timeout=settings.timeout, follow_redirects=False) as client:
        uris = await asyncio.gather(*(_fetch(client, url, settings) for url in urls))
    return dict(zip(urls, uris))


async def _fetch(client: httpx.AsyncClient, url: str, settings: ImageFetch) -> str:
    host = urlsplit(url).hostname or ""
    await _check_host(host, url, settings)
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise RequestError(f"image {url}: the server answered {response.status_code}", param="messages")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > settings.max_bytes:
                    raise RequestError(f"image {url}: larger than {settings.max_bytes} bytes", param="messages")
    except httpx.HTTPError as exc:
        raise RequestError(f"image {url}: cannot fetch: {type(exc).__name__}: {exc}", param="messages") from exc
    mime = sniff_image_mime(bytes(data))
    if mime is None:
        raise RequestError(f"image {url}: not a PNG, JPEG, GIF, WebP or BMP image", param="messages")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


async def _check_host(host: str, url: str, settings: ImageFetch) -> None:
    listed = host.lower() in {h.lower() for h in settings.allowed_hosts}
    if settings.allowed_hosts and not listed:
        raise RequestError(f"image {url}: host '{host}' is not in server.image_fetch.allowed_hosts", param="messages")
    if listed:
        return  # an explicitly listed host may be private: the operator said so
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise RequestError(f"image {url}: cannot resolve '{host}': {exc}", param="messages") from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise RequestError(
                f"image {url}: '{host}' resolves to a non-public address ({address}); "
                "list the host in server.image_fetch.allowed_hosts to allow it",
                param="messages",
            )
