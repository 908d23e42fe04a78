"""Several endpoints per model on real HTTP: failover before the first byte only,
least-outstanding balancing, passive health, pooled keep-alive connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, free_port, serve
from tests.upstream.conftest import user

TEXT = Reply("openai/vllm_text.sse")
HELLO = "Hello! How can I help you today?"
OVERLOADED = Reply("openai/error_503.json", status=503, headers={"Retry-After": "3"})
SLOW = Reply("openai/vllm_text.sse", delay_between=0.1)  # about 1.3 s


@pytest.fixture(scope="module")
def good() -> Iterator[ReplayServer]:
    script = {"ha-ok": TEXT, "ha-busy": TEXT, "ha-limited": TEXT, "lb-long": SLOW, "lb-quick": TEXT,
              "ha-abort": Reply("openai/vllm_text.sse", abort_after=3), "x": TEXT, "y": TEXT, "ha-drip": SLOW}
    with replay_server(script) as server:
        yield server


@pytest.fixture(scope="module")
def bad() -> Iterator[ReplayServer]:
    script = {"ha-busy": OVERLOADED, "ha-limited": Reply("openai/error_429.json", status=429, headers={"Retry-After": "7"}),
              "ha-all-busy": OVERLOADED, "lb-long": SLOW, "lb-quick": TEXT,
              "ha-abort": Reply("openai/vllm_text.sse", abort_after=3)}
    with replay_server(script) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(good: ReplayServer, bad: ReplayServer) -> Iterator[RunningServer]:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    config = config_from_yaml(
        f"""\
        models:
          - name: ha-busy
            backend: openai
            endpoints: [{bad.url}/v1, {good.url}/v1]
            max_failures: 2
            cooldown: 1.0
            affinity: none  # identical requests here: least loaded, ties in turn
          - name: ha-limited
            backend: openai
            endpoints: [{bad.url}/v1, {good.url}/v1]
            affinity: none
          - name: ha-abort
            backend: openai
            endpoints: [{bad.url}/v1, {good.url}/v1]
          - name: ha-drip
            backend: openai
            base_url: {good.url}/v1
          - name: ha-all-busy
            backend: openai
            endpoints: [{bad.url}/v1, {bad.url}/v1]
          - name: "refused"
            backend: openai
            model: ha-ok
            endpoints: [{closed}, {good.url}/v1]
          - name: "lb-*"
            backend: openai
            endpoints: [{bad.url}/v1, {good.url}/v1]
          - name: x
            backend: openai
            base_url: {good.url}/v1
          - name: y
            backend: openai
            base_url: {good.url}/v1
        """
    )
    with serve(config) as server:
        yield server


def ask(gateway: RunningServer, model: str, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(gateway.url + path, json={"model": model, "messages": user()}, timeout=10)


def test_5xx_fails_over_and_a_failing_endpoint_is_skipped_for_a_cooldown(
    gateway: RunningServer, good: ReplayServer, bad: ReplayServer
) -> None:
    replies = [ask(gateway, "ha-busy") for _ in range(6)]
    assert [r.status_code for r in replies] == [200] * 6
    assert {r.json()["choices"][0]["message"]["content"] for r in replies} == {HELLO}
    # Tried in turn until it failed max_failures (2) times in a row, then skipped.
    assert len(bad.requests_for("ha-busy")) == 2
    time.sleep(1.1)  # the cooldown passes: one request tries it again, and it fails again
    assert all(ask(gateway, "ha-busy").status_code == 200 for _ in range(4))
    assert len(bad.requests_for("ha-busy")) == 3


def test_connect_error_fails_over(gateway: RunningServer) -> None:
    assert [ask(gateway, "refused", path).status_code for path in ("/v1/chat/completions", "/api/chat") * 2] == [200] * 4


def test_429_is_passed_through_not_failed_over(gateway: RunningServer, bad: ReplayServer) -> None:
    statuses = [ask(gateway, "ha-limited").status_code for _ in range(4)]
    assert sorted(statuses) == [200, 200, 429, 429]  # every other request starts on the limited endpoint
    assert len(bad.requests_for("ha-limited")) == 2


def test_every_endpoint_5xx_passes_the_last_answer_through(gateway: RunningServer, bad: ReplayServer) -> None:
    response = ask(gateway, "ha-all-busy", "/api/chat")
    assert response.status_code == 503 and response.headers["retry-after"] == "3"
    assert response.json()["error"] == "The server is overloaded or not ready yet."
    assert len(bad.requests_for("ha-all-busy")) == 2


def test_no_retry_once_the_reply_has_started(gateway: RunningServer, good: ReplayServer, bad: ReplayServer) -> None:
    response = httpx.post(
        gateway.url + "/api/chat", json={"model": "ha-abort", "messages": user(), "stream": True}, timeout=10
    )
    lines = response.text.splitlines()
    assert "connection lost mid-reply" in lines[-1]
    assert len(good.requests_for("ha-abort")) + len(bad.requests_for("ha-abort")) == 1


def test_least_outstanding_requests(gateway: RunningServer, good: ReplayServer, bad: ReplayServer) -> None:
    """While one endpoint streams a long reply, quick requests all go to the other one
    (taking turns would send every second one to the busy endpoint)."""
    long = threading.Thread(target=ask, args=(gateway, "lb-long"))
    long.start()
    deadline = time.monotonic() + 5
    while not (good.requests_for("lb-long") or bad.requests_for("lb-long")) and time.monotonic() < deadline:
        time.sleep(0.01)
    busy, idle = (good, bad) if good.requests_for("lb-long") else (bad, good)
    for _ in range(4):
        assert ask(gateway, "lb-quick").status_code == 200
    long.join()
    assert (len(idle.requests_for("lb-quick")), len(busy.requests_for("lb-quick"))) == (4, 0)


def test_connections_are_pooled_and_shared_between_entries(gateway: RunningServer, good: ReplayServer) -> None:
    before = good.connections
    for model in ["x", "y"] * 5:
        assert ask(gateway, model).status_code == 200
    assert good.connections - before <= 1  # ten requests, two entries, one kept-alive connection


def test_client_disconnect_stops_the_upstream(gateway: RunningServer, good: ReplayServer) -> None:
    before = good.disconnects
    body = {"model": "ha-drip", "messages": user(), "stream": True}
    with httpx.stream("POST", gateway.url + "/api/chat", json=body, timeout=10) as response:
        next(response.iter_lines())
    deadline = time.monotonic() + 3
    while good.disconnects == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert good.disconnects == before + 1
