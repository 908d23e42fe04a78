"""/health/ready is open to anyone, and each probe is a request to every upstream with
the operator's keys: its result is reused for a few seconds and concurrent calls share
one probe, so calling it in a loop does not become a flood on the upstreams."""

from __future__ import annotations

import asyncio
import time

import httpx

from dragoman.proxy.health_routes import READY_CACHE_SECONDS
from tests.support.replay import ReplayServer, Reply
from tests.support.replay_gateway import replay_gateway
from tests.support.server import RunningServer

UPSTREAMS = 5


def gateway_config(upstream: ReplayServer) -> str:
    models = "".join(
        f"""
          - name: up-{i}
            backend: openai
            base_url: {upstream.url}/v1
            api_key: sk-operator-{i}
        """
        for i in range(UPSTREAMS)
    )
    return "models:" + models


# a slow model list, so that concurrent /health/ready calls overlap one probe
upstream, gateway = replay_gateway({"/v1/models": Reply("openai/models.json", delay_headers=0.3)}, gateway_config)


def _model_lists(upstream: ReplayServer) -> int:
    return sum(1 for r in upstream.received if r.path == "/v1/models")


def test_twenty_calls_probe_each_upstream_once(gateway: RunningServer, upstream: ReplayServer) -> None:
    before = _model_lists(upstream)
    started = time.monotonic()
    statuses = [httpx.get(gateway.url + "/health/ready").status_code for _ in range(20)]
    assert time.monotonic() - started < READY_CACHE_SECONDS, "the calls outlived the cache; the count means nothing"
    assert statuses == [200] * 20
    assert _model_lists(upstream) - before == UPSTREAMS  # was 20 × 5


def test_concurrent_calls_share_one_probe_and_a_stale_result_is_probed_again(
    gateway: RunningServer, upstream: ReplayServer
) -> None:
    time.sleep(READY_CACHE_SECONDS + 0.1)  # whatever an earlier test cached has expired
    before = _model_lists(upstream)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=10) as client:
            replies = await asyncio.gather(*(client.get(gateway.url + "/health/ready") for _ in range(20)))
        return [r.status_code for r in replies]

    assert asyncio.run(burst()) == [200] * 20
    assert _model_lists(upstream) - before == UPSTREAMS
    time.sleep(READY_CACHE_SECONDS + 0.1)
    assert httpx.get(gateway.url + "/health/ready").status_code == 200
    assert _model_lists(upstream) - before == 2 * UPSTREAMS
