"""Prometheus metrics, recorded once per request from its :class:`RequestRecord`.

Each app has its own registry (several apps can live in one process, as in tests);
gauges that describe backends are read at scrape time, not kept up to date.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dragoman.proxy.record import RequestRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_KNOWN_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/models", "/api/chat", "/api/tags", "/api/show", "/api/ps", "/api/version", "/",
     "/health/live", "/health/ready", "/metrics", "/api/embed", "/api/embeddings", "/v1/embeddings"}
)


def route_label(path: str) -> str:
    """Bounded label values: unknown paths must not grow the series without limit."""
    if path in _KNOWN_ROUTES:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    if path == "/ui" or path.startswith("/ui/"):
        return "/ui"
    return "other"


class Metrics:
    def __init__(self, backend_gauges: Callable[[], Iterator[GaugeMetricFamily]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "dragoman_requests", "HTTP requests", ["route", "dialect", "model", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "dragoman_request_duration_seconds", "Whole request time, to the last byte",
            ["route", "dialect", "model"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.ttft = Histogram(
            "dragoman_time_to_first_token_seconds", "Time from request to the first generated token",
            ["dialect", "model"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.tokens = Counter(
            "dragoman_tokens", "Tokens processed", ["model", "direction"], registry=self.registry
        )
        # Apart from dragoman_tokens, which they are counted in already (direction "in"):
        # a third direction there would be summed twice by a sum over directions.
        self.cached_tokens = Counter(
            "dragoman_cached_prompt_tokens", "Prompt tokens read from a prompt cache, not computed again",
            ["model"], registry=self.registry,
        )
        self.speed = Histogram(
            "dragoman_generation_tokens_per_second", "Generated tokens per second, per request", ["model"],
            buckets=(1, 5, 10, 20, 50, 100, 200, 500, 1000, 5000), registry=self.registry,
        )
        self.embed_requests = Counter(
            "dragoman_embedding_requests", "Embedding requests", ["model", "status"], registry=self.registry
        )
        # Usage per API key given a name in server.api_keys (the name, never the key).
        self.key_requests = Counter("dragoman_key_requests", "Requests by API key name and status", ["key", "status"], registry=self.registry)
        self.key_tokens = Counter("dragoman_key_tokens", "Tokens by API key name (in: prompt, out: generated)", ["key", "direction"], registry=self.registry)
        self.embed_inputs = Counter("dragoman_embedding_inputs", "Inputs embedded", ["model"], registry=self.registry)
        self.embed_tokens = Counter("dragoman_embedding_tokens", "Tokens embedded", ["model"], registry=self.registry)
        self.embed_latency = Histogram(
            "dragoman_embedding_duration_seconds", "Whole embedding request time", ["model"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.registry.register(_BackendCollector(backend_gauges))
        # Labelled children, looked up once: ``labels()`` validates and locks on every
        # call (about 2 µs, up to seven a request). As bounded as the label values.
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, record: RequestRecord, now: float) -> None:
        route = route_label(record.path)
        # The config entry's name, never the client's string: 3,000 names matching one
        # glob are one series, and a name nobody configured is none.
        model = record.entry or ""
        child = self._child
        child(self.requests, route, record.dialect, model, str(record.status)).inc()
        child(self.latency, route, record.dialect, model).observe(now - record.started)
        if record.key_name is not None:
            child(self.key_requests, record.key_name, str(record.status)).inc()
            if record.usage is not None:
                child(self.key_tokens, record.key_name, "in").inc(record.usage.prompt_tokens)
                child(self.key_tokens, record.key_name, "out").inc(record.usage.completion_tokens)
        if record.embed_inputs is not None:
            self._observe_embedding(record, model, now)
            return
        if record.first_token_at is not None:
            child(self.ttft, record.dialect, model).observe(record.first_token_at - record.started)
        if record.usage is not None:
            child(self.tokens, model, "in").inc(record.usage.prompt_tokens)
            child(self.tokens, model, "out").inc(record.usage.completion_tokens)
            if record.usage.cached_tokens is not None:  # None: the backend cannot tell
                child(self.cached_tokens, model).inc(record.usage.cached_tokens)
            if record.first_token_at is not None and record.usage.completion_tokens > 1 and now > record.first_token_at:
                child(self.speed, model).observe((record.usage.completion_tokens - 1) / (now - record.first_token_at))

    def _observe_embedding(self, record: RequestRecord, model: str, now: float) -> None:
        child = self._child
        child(self.embed_requests, model, str(record.status)).inc()
        child(self.embed_latency, model).observe(now - record.started)
        if 200 <= record.status < 300:
            child(self.embed_inputs, model).inc(record.embed_inputs or 0)
            if record.usage is not None:
                child(self.embed_tokens, model).inc(record.usage.prompt_tokens)
                child(self.tokens, model, "in").inc(record.usage.prompt_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _BackendCollector(Collector):
    def __init__(self, gauges: Callable[[], Iterator[GaugeMetricFamily]]) -> None:
        self._gauges = gauges

    def collect(self) -> Iterator[Any]:
        yield from self._gauges()

    def describe(self) -> list[Any]:
        return []
