"""The upstream's own model list, fetched on demand and kept for a while.

Discovery must never make ``/api/tags`` slow or failing: a failed fetch keeps serving
the last good list and is not retried for a few seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from fnmatch import fnmatchcase

import msgspec
import structlog

from dragoman.adapters.ollama.wire import TagDetails
from dragoman.backends.base import ModelDetails

log = structlog.get_logger("dragoman.upstream")

RETRY_AFTER_FAILURE = 5.0  # seconds

Fetch = Callable[[], Awaitable[dict[str, ModelDetails]]]


class ModelCatalog:
    """Names (and what the upstream says about them) from ``fetch``, cached for ``ttl``
    seconds; only names that ``pattern`` matches, since only those route here."""

    def __init__(self, fetch: Fetch, *, ttl: float, pattern: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._ttl = ttl
        self._pattern = pattern
        self._clock = clock
        self._models: dict[str, ModelDetails] = {}
        self._fresh_until = float("-inf")
        self._lock = asyncio.Lock()

    async def names(self) -> list[str]:
        if self._clock() >= self._fresh_until:
            async with self._lock:  # one fetch at a time; the others wait for its result
                if self._clock() >= self._fresh_until:
                    await self._refresh()
        return list(self._models)

    def details(self, name: str) -> ModelDetails | None:
        return self._models.get(name)

    async def _refresh(self) -> None:
        try:
            models = await self._fetch()
        except Exception as exc:  # best effort: keep the last good list
            self._fresh_until = self._clock() + min(self._ttl, RETRY_AFTER_FAILURE)
            log.warning("model discovery failed", pattern=self._pattern, error=str(exc), kept=len(self._models))
            return
        self._models = {name: d for name, d in models.items() if fnmatchcase(name, self._pattern)}
        self._fresh_until = self._clock() + self._ttl


# -- what upstreams answer ---------------------------------------------------------------


class _OpenAIModel(msgspec.Struct):
    id: str
    owned_by: str | None = None


class _OpenAIModelList(msgspec.Struct):
    data: list[_OpenAIModel] | None = None


class _OllamaModel(msgspec.Struct):
    name: str = ""
    model: str = ""
    size: int = 0
    details: TagDetails | None = None


class _OllamaTags(msgspec.Struct):
    models: list[_OllamaModel] | None = None


def parse_openai_models(body: bytes, kind: str = "openai") -> dict[str, ModelDetails]:
    """``GET /v1/models``: ``{"object": "list", "data": [{"id": …}, …]}``."""
    listing = msgspec.json.decode(body, type=_OpenAIModelList)
    return {m.id: ModelDetails(format=kind, family=m.owned_by or "remote") for m in listing.data or ()}


def parse_ollama_tags(body: bytes) -> dict[str, ModelDetails]:
    """``GET /api/tags``: ``{"models": [{"name", "model", "size", "details": {…}}, …]}``."""
    listing = msgspec.json.decode(body, type=_OllamaTags)
    found: dict[str, ModelDetails] = {}
    for m in listing.models or ():
        d = m.details or TagDetails()
        found[m.name or m.model] = ModelDetails(
            format=d.format or "ollama",
            family=d.family or "remote",
            families=d.families,
            parameter_size=d.parameter_size,
            quantization_level=d.quantization_level,
            size=m.size,
        )
    return found


__all__ = ["ModelCatalog", "parse_ollama_tags", "parse_openai_models"]
