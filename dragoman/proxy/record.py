"""What one request did, filled in as it goes and logged once when its response ends."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dragoman.adapters.canonical import ContentDelta, Event, ThinkingDelta, Timings, ToolCallDone, ToolCallFragment, Usage
from dragoman.adapters.dialect import DialectName
from dragoman.adapters.dialects import dialect_for_path

_TOKEN_EVENTS = (ContentDelta, ThinkingDelta, ToolCallDone, ToolCallFragment)

SCOPE_KEY = "dragoman.record"


Dialect = DialectName  # a record names its dialect; dialect_named gives the object


def dialect_of(path: str, anthropic_version: bool = False) -> Dialect:
    """The dialect of a request on ``path`` (see :func:`adapters.dialects.dialect_for_path`)."""
    return dialect_for_path(path, ("anthropic-version",) if anthropic_version else ()).name


def scope_dialect(scope: Mapping[str, Any]) -> Dialect:
    """The dialect of an ASGI request: its path, and the names of its headers."""
    names = [name.decode("latin-1") for name, _ in scope.get("headers", ())]
    return dialect_for_path(scope.get("path", ""), names).name


class RequestRecord:
    __slots__ = (
        "request_id", "method", "path", "dialect", "model", "entry", "backend", "status", "usage", "error", "started",
        "first_token_at", "embed_inputs", "finish_reason", "timings", "key_name", "key_policy",
    )

    def __init__(self, request_id: str, method: str, path: str, dialect: Dialect | None = None) -> None:
        self.request_id = request_id
        self.method = method
        self.path = path
        self.dialect = dialect or dialect_of(path)
        self.model: str | None = None  # as the client asked for it
        self.entry: str | None = None  # the config entry that served it (a pattern's own name)
        self.backend: str | None = None
        self.status = 0
        self.usage: Usage | None = None
        self.error: str | None = None
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.embed_inputs: int | None = None  # set by embedding requests only
        self.finish_reason: str | None = None  # of a generated reply (traces)
        self.timings: Timings | None = None  # the backend's own prefill and decode times (traces)
        self.key_name: str | None = None  # the name of the client's key, when it has one (usage per key)
        self.key_policy: Any = None  # its KeyPolicy (proxy/key_limits.py): which models it may use

    def mark(self, event: Event) -> None:
        """Note the time of the first generated token (for time-to-first-token)."""
        if self.first_token_at is None and isinstance(event, _TOKEN_EVENTS):
            self.first_token_at = time.perf_counter()

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "dialect": self.dialect,
            "status": self.status,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 2),
        }
        if self.model is not None:
            out["model"] = self.model
            out["backend"] = self.backend
        if self.first_token_at is not None:
            out["ttft_ms"] = round((self.first_token_at - self.started) * 1000, 2)
        if self.usage is not None:
            out["prompt_tokens"] = self.usage.prompt_tokens
            if self.usage.cached_tokens is not None:  # of prompt_tokens; absent where the backend cannot tell
                out["cached_tokens"] = self.usage.cached_tokens
            if self.usage.cache_write_tokens is not None:  # of prompt_tokens; only upstreams report them
                out["cache_write_tokens"] = self.usage.cache_write_tokens
            out["generated_tokens"] = self.usage.completion_tokens
        if self.embed_inputs is not None:
            out["inputs"] = self.embed_inputs
        if self.key_name is not None:
            out["key"] = self.key_name
        if self.error is not None:
            out["error"] = self.error
        return out
