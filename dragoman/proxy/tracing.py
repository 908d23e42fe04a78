"""OpenTelemetry traces: one server span per HTTP request, continuing the client's W3C
``traceparent``, with the GenAI semantic-convention attributes (model, token counts,
finish reason) and child spans for the admission wait (backends/admission.py), each
upstream attempt (backends/upstream/failover.py, which passes ``traceparent`` on), and a
local model's prefill and decode (drawn from the backend's own timings once the reply
ends).

Off unless configured (``server.tracing.endpoint`` or the standard ``OTEL_EXPORTER_OTLP_*``
variables); then the SDK and its OTLP/HTTP exporter (the ``tracing`` extra) must be
installed, and start-up says how to install them when they are not. Spans are exported in
batches on the SDK's own thread, never on the request's path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import structlog
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from dragoman.config import ConfigError
from dragoman.config.schema import TracingConfig
from dragoman.proxy.record import SCOPE_KEY, RequestRecord

log = structlog.get_logger("dragoman")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
LOCAL_BACKENDS = frozenset({"onnx", "ctransformers"})
_installed: list[Any] = []  # the process's provider: OpenTelemetry takes one per process


class TracingUnavailable(ConfigError):
    """Tracing is configured and the SDK is missing: start-up stops and says what to install."""


def tracing_endpoint(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> str | None:
    """Where spans go, or None when tracing is off (``OTEL_SDK_DISABLED=true`` wins)."""
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    if config.endpoint:
        return config.endpoint.rstrip("/") + "/v1/traces"
    if traces := environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    if base := environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return base.rstrip("/") + "/v1/traces"
    return None


def start_tracing(config: TracingConfig) -> Tracer | None:
    """The tracer of this process when tracing is configured (its provider installed
    once, globally, so the backends' spans join the request's), else None."""
    endpoint = tracing_endpoint(config)
    if endpoint is None:
        return None
    if not _installed:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as err:
            raise TracingUnavailable(
                f"tracing is configured (spans to {endpoint}) but the OpenTelemetry SDK is not installed ({err.name}): "
                "pip install 'dragoman[tracing]', or unset server.tracing.endpoint and OTEL_EXPORTER_OTLP_ENDPOINT"
            ) from err
        provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        trace.set_tracer_provider(provider)
        _installed.append(provider)
        log.info("tracing on", endpoint=endpoint)
    return trace.get_tracer("dragoman")


def stop_tracing() -> None:
    """Send what is still batched (at shutdown)."""
    for provider in _installed:
        provider.force_flush(5000)


class _HeaderGetter(Getter[dict[str, list[str]]]):
    def get(self, carrier: dict[str, list[str]], key: str) -> list[str] | None:
        return carrier.get(key)

    def keys(self, carrier: dict[str, list[str]]) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()


def _headers(scope: Mapping[str, Any]) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for name, value in scope.get("headers", ()):
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


def trace_requests(tracer: Tracer) -> Any:
    """An ASGI middleware factory: a server span around each HTTP request, inside the
    access log's (whose record it reads when the request ends)."""

    def middleware_for(app: Any) -> Any:
        async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            parent = propagate.extract(_headers(scope), getter=_GETTER)
            name = f"{scope['method']} {scope['path']}"
            with tracer.start_as_current_span(name, context=parent, kind=SpanKind.SERVER) as span:
                span.set_attributes({"http.request.method": scope["method"], "url.path": scope["path"]})
                try:
                    await app(scope, receive, send)
                finally:
                    record: RequestRecord | None = scope.get(SCOPE_KEY)
                    if record is not None:
                        describe(span, record, tracer)

        return middleware

    return middleware_for


def describe(span: trace.Span, record: RequestRecord, tracer: Tracer) -> None:
    """The request's outcome on its span, in the GenAI semantic conventions' names."""
    span.set_attribute("http.response.status_code", record.status)
    span.set_attribute("dragoman.request_id", record.request_id)
    if record.model is not None:
        span.set_attributes({
            "gen_ai.operation.name": "embeddings" if record.embed_inputs is not None else "chat",
            "gen_ai.request.model": record.model,
            "gen_ai.provider.name": record.backend or "",
            "dragoman.dialect": record.dialect,
        })
    if record.usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", record.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", record.usage.completion_tokens)
    if record.finish_reason is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [record.finish_reason])
    if record.error is not None or record.status >= 500:
        span.set_status(Status(StatusCode.ERROR, record.error or f"HTTP {record.status}"))
    if record.backend in LOCAL_BACKENDS and record.timings is not None and record.first_token_at is not None:
        _local_phases(record, tracer)


def _local_phases(record: RequestRecord, tracer: Tracer) -> None:
    """Prefill and decode as child spans, placed by the backend's own durations: the
    prefill ends at the first token, the decode starts there."""
    assert record.timings is not None and record.first_token_at is not None
    first_token_ns = time.time_ns() - int((time.perf_counter() - record.first_token_at) * 1e9)
    timings = record.timings
    if timings.prompt_eval_ns:
        tracer.start_span("prefill", start_time=first_token_ns - timings.prompt_eval_ns).end(end_time=first_token_ns)
    if timings.eval_ns:
        tracer.start_span("decode", start_time=first_token_ns).end(end_time=first_token_ns + timings.eval_ns)


__all__ = ["TracingUnavailable", "describe", "start_tracing", "stop_tracing", "trace_requests", "tracing_endpoint"]
