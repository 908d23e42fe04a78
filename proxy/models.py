"""The served models: one backend instance per config entry, and name resolution."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import structlog

from adapters.errors import ModelNotFound
from backends.base import Backend
from config import Config, ModelRoute, resolve

log = structlog.get_logger("dragoman.models")

BackendFactory = Callable[[ModelRoute], Backend]


class ModelTable:
    """Maps requested model names to (route, backend); owns the backend instances."""

    def __init__(self, config: Config, factory: BackendFactory) -> None:
        self.config = config
        self.started = dt.datetime.now(dt.timezone.utc)
        self._backends: dict[int, Backend] = {id(route): factory(route) for route in config.models}

    def lookup(self, name: str) -> tuple[ModelRoute, Backend]:
        route = resolve(self.config, name)
        if route is None:
            raise ModelNotFound(name)
        return route, self._backends[id(route)]

    def entries(self) -> list[tuple[ModelRoute, Backend]]:
        return [(route, self._backends[id(route)]) for route in self.config.models]

    async def listed_names(self) -> list[tuple[str, ModelRoute, Backend]]:
        """Every name a client can ask for: exact entries, names a pattern entry's
        backend discovers, then aliases."""
        names: list[tuple[str, ModelRoute, Backend]] = []
        for route, backend in self.entries():
            if not route.config.is_pattern:
                names.append((route.config.name, route, backend))
            try:
                discovered = await backend.list_models()
            except Exception as exc:  # discovery is best effort; chat still works
                log.warning("discovery failed", model=route.config.name, error=str(exc))
                discovered = []
            names += [(n, route, backend) for n in discovered if n != route.config.name]
        for alias in self.config.aliases:
            route, backend = self.lookup(alias)
            names.append((alias, route, backend))
        return names

    async def aclose(self) -> None:
        for backend in self._backends.values():
            try:
                await backend.aclose()
            except Exception as exc:  # closing the others matters more
                log.warning("backend close failed", error=str(exc))


def build_backend(route: ModelRoute) -> Any:
    from backends.registry import backend_class

    return backend_class(route.config.backend)(route)
