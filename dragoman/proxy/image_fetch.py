"""Fetching http(s) image URLs named by clients — off unless configured.

A client-named URL fetched by the server is a server-side request forgery risk and
an amplifier, so each fetch:

- goes only to hosts on the allow-list (when one is set);
- resolves the name once, refuses it if any address it resolves to is not public
  (:mod:`proxy.public_address`) unless the host is listed explicitly, and connects to
  the address it checked — never resolving again, which a rebinding name exploits —
  with the name kept for ``Host`` and TLS (SNI and certificate check);
- asks for ``identity`` and decodes any ``Content-Encoding`` with the size cap applied
  inside the decompressor (:mod:`proxy.bounded_decode`);
- has one deadline for all of it (a server dripping a byte a second cannot hold it);
- follows no redirects (a redirect could lead anywhere).

A request's fetches run a few at a time, and only after the request has been checked:
image count, a known model that takes images.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import httpx

from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.adapters.images import sniff_image_mime
from dragoman.config.schema import ImageFetch
from dragoman.proxy.bounded_decode import TooLarge, UnsupportedEncoding, decode_body
from dragoman.proxy.limits import check_image_count
from dragoman.proxy.public_address import Address, refusal

if TYPE_CHECKING:
    from dragoman.proxy.models import ModelTable

Resolver = Callable[[str, int], Awaitable[list[str]]]

# Room for a compressed body's own overhead over the decoded cap (incompressible data
# grows a little when compressed).
_ENCODED_SLACK = 64 * 1024


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# The resolver in use, and what TLS trusts; a test swaps in a resolver that answers
# names this machine cannot resolve, and its own certificate authority.
resolve: Resolver = system_resolve
verify: ssl.SSLContext | bool = True


def check_before_fetching(models: ModelTable, model: str, image_parts: int) -> None:
    """A fetch costs the server work and bandwidth: only for a request that could use
    its result — not too many images, a known model, one that takes images."""
    check_image_count(image_parts, models.limits)
    _, backend = models.lookup(model)
    if not backend.capabilities(model).vision:
        raise UnsupportedFeature(f"model '{model}' does not support images", param="messages")


async def fetch_as_data_uris(urls: list[str], settings: ImageFetch) -> dict[str, str]:
    gate = asyncio.Semaphore(settings.max_concurrent)
    async with httpx.AsyncClient(timeout=settings.timeout, follow_redirects=False, trust_env=False, verify=verify) as client:

        async def one(url: str) -> str:
            async with gate:
                return await _fetch(client, url, settings)

        uris = await asyncio.gather(*(one(url) for url in urls))
    return dict(zip(urls, uris))


async def _fetch(client: httpx.AsyncClient, url: str, settings: ImageFetch) -> str:
    try:
        async with asyncio.timeout(settings.timeout):
            data = await _fetch_bytes(client, url, settings)
    except TimeoutError:
        raise _refused(url, f"not fetched within {settings.timeout:g}s (server.image_fetch.timeout)") from None
    mime = sniff_image_mime(data)
    if mime is None:
        raise _refused(url, "not a PNG, JPEG, GIF, WebP or BMP image")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


async def _fetch_bytes(client: httpx.AsyncClient, url: str, settings: ImageFetch) -> bytes:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.username is not None or parts.password is not None:
        raise _refused(url, "URLs with credentials are not fetched")
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        raise _refused(url, "not a valid URL (bad port)") from None
    addresses = await _checked_addresses(host, port, url, settings)
    last_error: Exception | None = None
    for address in addresses:
        try:
            return await _get(client, url, address, settings)
        except httpx.ConnectError as exc:  # try the name's next address
            last_error = exc
        except httpx.HTTPError as exc:
            raise _refused(url, f"cannot fetch: {type(exc).__name__}: {exc}") from exc
    raise _refused(url, f"cannot connect: {last_error}")


async def _checked_addresses(host: str, port: int, url: str, settings: ImageFetch) -> list[Address]:
    listed = host.lower() in {h.lower() for h in settings.allowed_hosts}
    if settings.allowed_hosts and not listed:
        raise _refused(url, f"host '{host}' is not in server.image_fetch.allowed_hosts")
    try:
        found = await resolve(host, port)
    except OSError as exc:
        raise _refused(url, f"cannot resolve '{host}': {exc}") from exc
    addresses: list[Address] = []
    for text in found:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise _refused(url, f"'{host}' resolves to '{text}', which is not an address") from None
        reason = None if listed else refusal(address)  # a listed host may be private: the operator said so
        if reason is not None:
            raise _refused(
                url,
                f"'{host}' resolves to a non-public address ({address}: {reason}); "
                "list the host in server.image_fetch.allowed_hosts to allow it",
            )
        addresses.append(address)
    if not addresses:
        raise _refused(url, f"'{host}' resolves to no address")
    return addresses


async def _get(client: httpx.AsyncClient, url: str, address: Address, settings: ImageFetch) -> bytes:
    """GET ``url`` from ``address`` itself: the URL's host becomes the address, the
    name stays in ``Host`` and in TLS's server name (so the certificate is checked
    against the name, not the address)."""
    split = urlsplit(url)
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{literal}:{split.port}" if split.port else literal
    target = urlunsplit(split._replace(netloc=netloc))
    host_header = split.netloc.rsplit("@", 1)[-1]
    headers = {"host": host_header, "accept-encoding": "identity", "accept": "image/*"}
    extensions = {"sni_hostname": split.hostname} if split.scheme.lower() == "https" else {}
    request = client.build_request("GET", target, headers=headers, extensions=extensions)
    response = await client.send(request, stream=True)
    try:
        if response.status_code != 200:
            raise _refused(url, f"the server answered {response.status_code}")
        encoding = response.headers.get("content-encoding", "")
        raw_cap = settings.max_bytes + (_ENCODED_SLACK if encoding.strip().lower() not in ("", "identity") else 0)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > raw_cap:
            raise _refused(url, _too_large(settings))
        raw = bytearray()
        async for chunk in response.aiter_raw():  # raw: nothing is decompressed behind our back
            raw += chunk
            if len(raw) > raw_cap:
                raise _refused(url, _too_large(settings))
    finally:
        await response.aclose()
    try:
        return decode_body(bytes(raw), encoding, settings.max_bytes)
    except TooLarge:
        raise _refused(url, _too_large(settings)) from None
    except UnsupportedEncoding as exc:
        raise _refused(url, f"sent with Content-Encoding '{exc.args[0]}', which is not decoded here") from None
    except ValueError as exc:
        raise _refused(url, str(exc)) from None


def _too_large(settings: ImageFetch) -> str:
    return f"larger than {settings.max_bytes} bytes (server.image_fetch.max_bytes)"


def _refused(url: str, reason: str) -> RequestError:
    shown = url if len(url) <= 200 else url[:200] + "…"
    return RequestError(f"image {shown}: {reason}", param="messages")
