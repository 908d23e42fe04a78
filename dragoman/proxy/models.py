"""The served models: one backend instance per config entry, and name resolution."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import structlog
from prometheus_client.core import GaugeMetricFamily

from dragoman.adapters.errors import ModelNotFound
from dragoman.backends.admission import Admission
from dragoman.backends.base import Backend, Queued, Relay
from dragoman.config import Config, ModelRoute, resolve
from dragoman.proxy.cpus import cpu_cores
from dragoman.proxy.limits import check_model_name
from dragoman.proxy.shutdown import Lifetime

log = structlog.get_logger("dragoman.models")

BackendFactory = Callable[[ModelRoute], Backend]


# Embedding requests of one model entry running at once when server.limits.max_concurrent
# is unset; the ONNX embedding service batches their inputs together.
EMBED_CONCURRENT = 8


class ModelTable:
    """Maps requested model names to (route, backend); owns the backend instances."""

    def __init__(self, config: Config, factory: BackendFactory) -> None:
        self.config = config
        self.limits = config.server.limits
        self.lifetime = Lifetime(config.server.shutdown_grace)
        self.started = dt.datetime.now(dt.timezone.utc)
        self._backends: dict[int, Backend] = {id(route): factory(route) for route in config.models}
        # count_tokens on a local tokenizer is CPU work (a large prompt takes seconds) that
        # no chat queue bounds: at most one per core at once, max_queue more in line.
        self.counting = Admission(cpu_cores(), self.limits.max_queue)
        self._embed_gates: dict[int, Admission] = {}
        self._gates: dict[int, Admission] = {}
        if self.limits.max_concurrent is not None:
            self._gates = {
                id(route): Admission(self.limits.max_concurrent, self.limits.max_queue)
                for route in config.models
            }

    async def admit_embedding(self, route: ModelRoute) -> Callable[[], None]:
        """The model's gate when one is configured; otherwise, for a local model, a gate
        of its own for embeddings, which its backend does not bound: EMBED_CONCURRENT
        requests at once (batched together by the backend), max_queue more waiting, the
        rest 503. An upstream's are bounded by its connections, as its chats are."""
        if id(route) in self._gates or isinstance(self._backends.get(id(route)), Relay):
            return await self.admit(route)
        gate = self._embed_gates.setdefault(id(route), Admission(EMBED_CONCURRENT, self.limits.max_queue))
        await gate.acquire(route.config.name)
        return gate.release

    async def admit(self, route: ModelRoute) -> Callable[[], None]:
        """Wait for the model's gate (503 when its queue is full); returns the release."""
        gate = self._gates.get(id(route))
        if gate is None:
            return _nothing
        await gate.acquire(route.config.name)
        return gate.release

    def gauges(self) -> Iterator[GaugeMetricFamily]:
        """Backend-side gauges for /metrics, read at scrape time."""
        queue = GaugeMetricFamily("dragoman_queue_depth", "Requests waiting for a model", labels=["model"])
        active = GaugeMetricFamily("dragoman_active_requests", "Chats running per model entry", labels=["model"])
        for route, backend in self.entries():
            # The proxy's own gate when configured, else a backend's (the ONNX backend has one).
            gate = self._gates.get(id(route)) or (backend.admission if isinstance(backend, Queued) else None)
            if gate is not None:
                queue.add_metric([route.config.name], gate.waiting)
                active.add_metric([route.config.name], gate.active)
        loaded = GaugeMetricFamily("dragoman_loaded_models", "Models loaded in memory", labels=["model", "backend"])
        health = GaugeMetricFamily(
            "dragoman_upstream_endpoint_healthy", "1 when an upstream endpoint is in rotation", labels=["model", "endpoint"]
        )
        engine = GaugeMetricFamily(
            "dragoman_model_engine", "1 for each loaded model and the engine that runs it; reason: why the generator",
            labels=["model", "engine", "reason"],
        )
        for route, backend in self.entries():
            for model in backend.loaded():
                loaded.add_metric([model.name, route.config.backend], 1)
                if model.engine is not None:
                    engine.add_metric([model.name, model.engine.name, model.engine.reason], 1)
            if isinstance(backend, Relay):
                for endpoint, healthy in backend.endpoint_health().items():
                    health.add_metric([route.config.name, endpoint], 1 if healthy else 0)
        yield from (queue, active, loaded, engine, health)

    def lookup(self, name: str) -> tuple[ModelRoute, Backend]:
        check_model_name(name, self.limits)  # before a pattern is matched against it
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


def _nothing() -> None:
    return None


def build_backend(route: ModelRoute) -> Backend:
    from dragoman.backends.base import build_backend as build
    from dragoman.backends.registry import backend_class

    return build(backend_class(route.config.backend), route)
