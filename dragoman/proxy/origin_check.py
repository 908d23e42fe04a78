"""Cross-site requests refused before any handler runs.

CORS decides only whether a page may *read* a reply. A "simple" request — a form post,
a ``no-cors`` fetch, a ``text/plain`` or form-encoded body, ``Origin: null`` from a
sandboxed frame — is sent without a preflight, and the handler ran whatever the reply's
headers then said: any page could chat on the operator's upstream keys, pull or unload
models, store responses. So a request that carries an ``Origin`` is answered only when
that origin is on ``server.cors_origins`` (the same match as the CORS layer's) or is the
server's own: the scheme, host and port of the ``Host`` it was sent to, as the web page
at /ui is. Anything else is a 403 before routing, as Ollama answers it.

Preflights stay the CORS layer's (204, or 400 for an origin not listed; no handler runs
for them), and requests without an ``Origin`` — curl, the SDKs, agent CLIs, a browser's
same-origin GET — are not touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from litestar.config.cors import CORSConfig

from dragoman.adapters.errors import DragomanError
from dragoman.proxy.errors import send_error
from dragoman.proxy.host_check import split_authority

ASGIApp = Callable[..., Any]

DEFAULT_PORTS = {"http": 80, "https": 443}
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#@]+)")


def same_origin(origin: str, scheme: str, host_header: str | None) -> bool:
    """Whether ``origin`` is the server's own: ``scheme`` (the connection's) and the
    host and port of ``host_header``, default ports filled in on both sides."""
    match = _ORIGIN.fullmatch(origin.lower())
    if match is None or host_header is None or match.group("scheme") != scheme:
        return False
    theirs, ours = split_authority(match.group("authority")), split_authority(host_header)
    if theirs is None or ours is None:
        return False
    default = DEFAULT_PORTS.get(scheme)
    return theirs[0] == ours[0] and (theirs[1] or default) == (ours[1] or default)


def origin_check(cors: CORSConfig | None) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory: a request whose ``Origin`` is neither allowed by
    ``cors`` (None: CORS off, no origin listed) nor the server's own is a 403."""

    def allowed(scope: dict[str, Any], origin: str) -> bool:
        if cors is not None and cors.is_origin_allowed(origin):
            return True
        host = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"]
        return same_origin(origin, scope.get("scheme", "http"), host[0] if len(host) == 1 else None)

    def middleware(app: ASGIApp) -> ASGIApp:
        async def check(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = scope.get("headers", ())
            origins = [v.decode("latin-1") for k, v in headers if k == b"origin"]
            preflight = scope["method"] == "OPTIONS" and any(k == b"access-control-request-method" for k, _ in headers)
            if not origins or preflight or (len(origins) == 1 and allowed(scope, origins[0])):
                await app(scope, receive, send)
                return
            origin = ", ".join(origins)
            message = (
                f"Origin '{origin}' may not call this server: it is neither in server.cors_origins nor this "
                "server's own origin; add it to server.cors_origins if that page should use the API"
            )
            await send_error(scope, send, DragomanError(message, status=403, code="origin_not_allowed"))

        return check

    return middleware


__all__ = ["origin_check", "same_origin"]
