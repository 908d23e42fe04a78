"""Bearer-key authentication, answered in the caller's dialect.

Keys are compared with ``hmac.compare_digest`` against every configured key (no early
exit), so the time taken says nothing about how close a guess was.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from dragoman.adapters.dialects import dialect_named
from dragoman.adapters.errors import AuthenticationError
from dragoman.proxy.errors import error_body
from dragoman.proxy.record import scope_dialect


def key_matches(presented: str, keys: Iterable[bytes]) -> bool:
    candidate = presented.encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(candidate, key)
    return matched


def bearer_token(scope: Mapping[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def api_key_header(scope: Mapping[str, Any]) -> str | None:
    """``x-api-key``, as Anthropic clients send the key."""
    for name, value in scope.get("headers", []):
        if name == b"x-api-key":
            return value.decode("latin-1").strip()
    return None


def key_owner(key: str | None, keys_configured: bool) -> str:
    """Whose state a request presenting ``key`` may see (stored responses): a digest of
    the key the middleware let through, so the key itself is never written down; '' on
    a server without keys, where every client is the same one (as Ollama)."""
    if not keys_configured:
        return ""
    return hashlib.sha256((key or "").encode()).hexdigest()


def presented_key(scope: Mapping[str, Any]) -> str | None:
    """The client's key, read one way on every route: ``Authorization: Bearer <key>``,
    else ``x-api-key: <key>`` (as Anthropic clients and llama-server's send it)."""
    return bearer_token(scope) or api_key_header(scope)


def client_authorization(scope: Mapping[str, Any]) -> str | None:
    """The client's credentials as an ``Authorization`` value, for upstreams configured
    to forward them (``forward_auth``): its own ``Authorization`` header as sent, else
    its ``x-api-key`` as a bearer key."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return value.decode("latin-1")
    key = api_key_header(scope)
    return f"Bearer {key}" if key else None


def auth_middleware_factory(api_keys: list[str], open_paths: list[str]) -> Any:
    """An ASGI middleware that refuses requests without a configured key. With no keys
    configured it is not installed at all (any bearer value is accepted, as Ollama)."""
    keys = [k.encode() for k in api_keys]
    open_set = frozenset(open_paths)

    def middleware(app: Any) -> Any:
        async def check(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] in open_set or scope["method"] == "OPTIONS":
                await app(scope, receive, send)
                return
            dialect = scope_dialect(scope)
            token = presented_key(scope)
            if token is not None and key_matches(token, keys):
                await app(scope, receive, send)
                return
            how = dialect_named(dialect).key_hint
            reason = f"missing API key: send {how}" if token is None else "invalid API key"
            err = AuthenticationError(reason, code="invalid_api_key")
            body = error_body(dialect, err)
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})

        return check

    return middleware
