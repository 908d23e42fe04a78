"""CORS: which browser origins may call the API, and how preflights are answered.

On by default with Ollama's allow-list, so that browser clients (Obsidian plugins,
web apps on localhost, VS Code webviews) work as they do against Ollama. Origins are
patterns in which ``*`` stands for any run of characters within one part of the
origin (never a ``/``), compiled into the one regex Litestar's CORS layer checks.
That layer wraps the router, so preflights are answered before authentication (a
browser sends them without credentials): 204 with the origin echoed (and
``Vary: Origin``), the methods, the requested headers and ``Max-Age``; an origin
not allowed gets a 400 and no ``Access-Control-Allow-Origin``.
"""

from __future__ import annotations

import re

from litestar.config.cors import CORSConfig

from dragoman.config.schema import ServerConfig

# Headers a browser client may read from replies.
EXPOSED = ["X-Request-Id", "Retry-After"]


def origin_patterns(value: list[str] | str) -> list[str]:
    """The configured patterns; a string is split on commas and whitespace."""
    listed = value.replace(",", " ").split() if isinstance(value, str) else value
    return [p.strip() for p in listed if p.strip()]


def origin_regex(patterns: list[str]) -> str:
    """One regex (fullmatched) for all ``patterns``."""
    return "|".join("[^/]*".join(re.escape(piece) for piece in pattern.split("*")) for pattern in patterns)


def cors_config(server: ServerConfig) -> CORSConfig | None:
    patterns = origin_patterns(server.cors_origins)
    if not patterns:
        return None
    return CORSConfig(
        allow_origins=[],  # everything goes through the regex, so the origin is echoed, never "*"
        allow_origin_regex=origin_regex(patterns),
        allow_methods=["*"],
        allow_headers=["*"],
        allow_credentials=server.cors_allow_credentials,
        expose_headers=EXPOSED,
    )
