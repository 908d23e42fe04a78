"""What a model entry served by an upstream server may say in the YAML config.

Timeouts are seconds. ``first_byte_timeout`` is long by default because an upstream may
have to load the model and read a long prompt before it sends anything; once it has
started, a gap longer than ``idle_timeout`` between two chunks means it is stuck.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from dragoman.adapters.canonical import Secret
from dragoman.backends.upstream.endpoints import display_url, has_credentials


class UpstreamSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    base_url: str | None = None  # the one-endpoint spelling of ``endpoints``
    endpoints: list[str] = msgspec.field(default_factory=list)
    model: str | None = None  # the upstream's name; default: the name the client asked for
    api_key: str | None = None  # usually "${ENV_VAR}"
    forward_auth: bool = False  # pass the client's Authorization header on instead
    connect_timeout: float = 10.0
    first_byte_timeout: float = 300.0
    idle_timeout: float = 60.0
    total_timeout: float = 600.0
    # Passive health: an endpoint failing this many requests in a row is skipped for
    # ``cooldown`` seconds (while another endpoint is healthy).
    max_failures: int = 3
    cooldown: float = 30.0
    # With several endpoints: "prefix" sends requests sharing a prompt prefix (or the
    # client's prompt_cache_key / user) to the endpoint holding it while it is healthy
    # and not the most loaded (affinity.py); "none": least loaded only.
    affinity: Literal["prefix", "none"] = "prefix"
    max_connections: int = 100  # per upstream server, shared by every entry that uses it
    # List the upstream's own models (those this entry's name or pattern matches).
    discover: bool = False
    discover_ttl: float = 60.0
    # Text deltas that arrive in one read are forwarded as one (fewer, larger chunks
    # when the upstream outpaces us); false forwards every upstream chunk as its own.
    coalesce: bool = True
    # OpenAI upstreams only: send Ollama-only sampling options (top_k, min_p,
    # repeat_penalty, …) as extra body fields, as vLLM and llama-server accept them.
    extra_options: bool = False
    # What one reply may cost to read: a whole (non-streaming) reply body, one line of
    # a stream (an SSE event or an NDJSON object). Past either, the client gets a 502.
    max_reply_bytes: int = 64 * 1024 * 1024
    max_line_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if (self.base_url is None) == (not self.endpoints):
            raise ValueError("give the upstream as either 'base_url' or 'endpoints' (a list of URLs), not both")
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream URL '{url}' must start with http:// or https://")
        for name in ("connect_timeout", "first_byte_timeout", "idle_timeout", "total_timeout", "cooldown"):
            if getattr(self, name) <= 0:
                raise ValueError(f"'{name}' must be a positive number of seconds")
        if self.max_failures < 1 or self.max_connections < 1:
            raise ValueError("'max_failures' and 'max_connections' must be at least 1")
        if self.max_reply_bytes < 1024 or self.max_line_bytes < 1024:
            raise ValueError("'max_reply_bytes' and 'max_line_bytes' must be at least 1024")
        if self.api_key and any(has_credentials(url) for url in self.urls):
            raise ValueError(
                "an upstream URL carries credentials (user:password@) and 'api_key' is set too; "
                "give one of them (both would be an Authorization header)"
            )

    @property
    def urls(self) -> list[str]:
        """Every endpoint's base URL, without a trailing slash."""
        raw = self.endpoints or [self.base_url or ""]
        return [url.rstrip("/") for url in raw]

    @property
    def secret_key(self) -> Secret | None:
        return Secret(self.api_key) if self.api_key else None

    def __repr__(self) -> str:
        # Settings may end up in a log line or a traceback; the key must not.
        shown = {f: getattr(self, f) for f in self.__struct_fields__ if f != "api_key"}
        shown["base_url"] = display_url(self.base_url) if self.base_url else None
        shown["endpoints"] = [display_url(url) for url in self.endpoints]
        key = ", api_key='***'" if self.api_key else ""
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())}{key})"


class OpenAISettings(UpstreamSettings, frozen=True):
    # chat: /chat/completions. responses: the upstream's /responses (stateless: the
    # whole conversation every time, store false).
    api: Literal["chat", "responses"] = "chat"


class AnthropicSettings(UpstreamSettings, frozen=True):
    anthropic_version: str = "2023-06-01"
    # Anthropic requires max_tokens; used when the client set none.
    max_tokens: int = 4096

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_tokens < 1:
            raise ValueError("'max_tokens' must be at least 1")


__all__ = ["AnthropicSettings", "OpenAISettings", "UpstreamSettings"]
