"""The YAML config as typed structs. Strict: an unknown key is an error naming it.

A model entry mixes keys every backend shares (``ModelConfig``) with keys only its
backend knows (the backend's own ``Settings`` struct); :mod:`config.loader` splits them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from adapters.canonical import SamplingOptions

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
DEFAULT_KEEP_ALIVE = 300.0  # seconds, as Ollama's 5m


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    log_format: Literal["auto", "console", "json"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"


# Keys of a model entry that every backend shares; everything else is backend settings.
COMMON_MODEL_KEYS = frozenset({"name", "backend", "defaults", "context_length", "keep_alive", "description"})


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True):
    """One ``models:`` entry, less its backend settings."""

    name: str
    backend: str
    defaults: SamplingOptions = SamplingOptions()
    context_length: int | None = None
    # Seconds, or a Go-style duration string ("5m", "1h"); negative keeps forever.
    keep_alive: float | str | None = None
    description: str | None = None

    @property
    def is_pattern(self) -> bool:
        return any(c in self.name for c in "*?[")


class RawConfig(msgspec.Struct, forbid_unknown_fields=True):
    """The file as written: model entries still hold their backend keys."""

    server: ServerConfig = ServerConfig()
    models: list[dict[str, Any]] = msgspec.field(default_factory=list)
    aliases: dict[str, str] = msgspec.field(default_factory=dict)


class ModelRoute(msgspec.Struct):
    """A model entry ready to serve: shared keys, decoded backend settings."""

    config: ModelConfig
    settings: msgspec.Struct
    keep_alive: float  # seconds, resolved from the entry or the default


class Config(msgspec.Struct):
    server: ServerConfig
    models: list[ModelRoute]
    aliases: dict[str, str]
    source: str = "<built-in>"
