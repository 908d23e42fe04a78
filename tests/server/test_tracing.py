"""OpenTelemetry traces (proxy/tracing.py), exported over OTLP/HTTP to a receiver on
127.0.0.1 that decodes what arrives with the OTLP protobuf schema: one server span per
request continuing the client's traceparent, GenAI attributes, a child span per upstream
attempt whose traceparent the upstream receives, the local model's prefill and decode, and
nothing at all when tracing is not configured."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dragoman.config.schema import TracingConfig
from dragoman.proxy.tracing import tracing_endpoint
from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.serve_process import Served, dragoman_serve


class Receiver:
    """An OTLP/HTTP trace receiver: every span it is sent, as plain dicts."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource.resource.attributes}.get("service.name")
                    for scope in resource.scope_spans:
                        receiver.spans += [receiver.plain(span, service) for span in scope.spans]
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def plain(span: Any, service: str | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        for a in span.attributes:
            value = a.value
            kind = value.WhichOneof("value")
            attributes[a.key] = [v.string_value for v in value.array_value.values] if kind == "array_value" else getattr(value, kind)
        return {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                "parent": span.parent_span_id.hex(), "attributes": attributes, "service": service,
                "start": span.start_time_unix_nano, "end": span.end_time_unix_nano}

    def wait_for(self, predicate: Any, timeout: float = 15) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [span for span in list(self.spans) if predicate(span)]
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no such span among {[s['name'] for s in self.spans]}")


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayServer]:
    with replay_server({"traced-up": Reply("openai/vllm_text.sse")}) as server:
        yield server


@pytest.fixture(scope="module")
def served(receiver: Receiver, upstream: ReplayServer, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    config = tmp_path_factory.mktemp("tracing") / "tracing.yaml"
    config.write_text(
        "server: {workers: 1}\n"
        "models:\n"
        f"  - {{name: traced-up, backend: openai, base_url: '{upstream.url}/v1'}}\n"
        f"  - {{name: traced-local, backend: onnx, path: '{model_dir}', provider: cpu, context_length: 1024}}\n"
    )
    saved = {k: os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_SERVICE_NAME")}
    os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"})
    try:
        with dragoman_serve(config) as served:
            yield served
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_a_request_span_continues_the_clients_trace_and_the_upstream_gets_it(
    served: Served, receiver: Receiver, upstream: ReplayServer
) -> None:
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="x", default_headers={"traceparent": f"00-{trace_id}-{client_span}-01"})
    client.chat.completions.create(model="traced-up", messages=[{"role": "user", "content": "hello"}])
    (server_span,) = receiver.wait_for(lambda s: s["trace_id"] == trace_id and s["name"] == "POST /v1/chat/completions")
    assert server_span["parent"] == client_span and server_span["service"] == "dragoman"
    attributes = server_span["attributes"]
    assert attributes["gen_ai.request.model"] == "traced-up" and attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.usage.output_tokens"] > 0 and attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["http.response.status_code"] == 200
    (attempt,) = receiver.wait_for(lambda s: s["trace_id"] == trace_id and s["name"].startswith("upstream POST"))
    assert attempt["parent"] == server_span["span_id"] and attempt["attributes"]["server.address"] == f"{upstream.url}/v1"
    (sent,) = [r for r in upstream.requests_for("traced-up") if trace_id in r.headers.get("traceparent", "")]
    assert sent.headers["traceparent"].split("-")[2] == attempt["span_id"]  # the upstream continues the attempt's span


def test_a_local_reply_has_prefill_and_decode_spans(served: Served, receiver: Receiver) -> None:
    trace_id = secrets.token_hex(16)
    headers = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
    body = {"model": "traced-local", "messages": [{"role": "user", "content": "Say hello."}], "stream": False,
            "options": {"num_predict": 8, "temperature": 0}}
    assert httpx.post(served.url + "/api/chat", json=body, headers=headers, timeout=120).status_code == 200
    (server_span,) = receiver.wait_for(lambda s: s["trace_id"] == trace_id and s["name"] == "POST /api/chat")
    phases = {s["name"]: s for s in receiver.wait_for(lambda s: s["trace_id"] == trace_id and s["name"] in ("prefill", "decode"))}
    receiver.wait_for(lambda s: s["trace_id"] == trace_id and s["name"] == "decode")
    phases = {s["name"]: s for s in receiver.spans if s["trace_id"] == trace_id and s["name"] in ("prefill", "decode")}
    assert set(phases) == {"prefill", "decode"}
    assert all(p["parent"] == server_span["span_id"] for p in phases.values())
    assert phases["prefill"]["end"] == phases["decode"]["start"] and phases["prefill"]["start"] < phases["prefill"]["end"]
    assert server_span["attributes"]["gen_ai.provider.name"] == "onnx"


def test_tracing_is_off_unless_configured() -> None:
    assert tracing_endpoint(TracingConfig(), {}) is None
    assert tracing_endpoint(TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert tracing_endpoint(TracingConfig(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/t"}) == "http://c/t"
    assert tracing_endpoint(TracingConfig(endpoint="http://d:4318"), {}) == "http://d:4318/v1/traces"
    assert tracing_endpoint(TracingConfig(endpoint="http://d:4318"), {"OTEL_SDK_DISABLED": "true"}) is None
