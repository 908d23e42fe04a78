"""``/v1/messages/count_tokens`` on a local tokenizer is CPU work no chat queue bounds:
it runs at most one per core, ``max_queue`` more wait, the rest are refused at once with
Anthropic's 529 and ``Retry-After`` (before: every request was taken, each holding its
body, and a short count waited behind all of them). Real model, real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dragoman.proxy.models import cpu_cores
from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "smollm2:135m"


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        server:
          limits: {{max_queue: 1}}
        models:
          - name: "{MODEL}"
            backend: onnx
            path: {model_dir}
            provider: cpu
        """
    )
    with serve(config) as running:
        yield running


def test_counting_is_admitted_like_work(server: RunningServer) -> None:
    big = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 200_000}]}
    many = cpu_cores() + 1 + 3  # one per core, one in line, three over

    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            return list(await asyncio.gather(*(client.post("/v1/messages/count_tokens", json=big) for _ in range(many))))

    replies = asyncio.run(flood())
    statuses = sorted(r.status_code for r in replies)
    assert statuses.count(200) >= cpu_cores() + 1 and 529 in statuses, statuses
    refused = next(r for r in replies if r.status_code == 529)
    assert refused.json()["error"]["type"] == "overloaded_error" and refused.headers["retry-after"] == "1"
    counted = {r.json()["input_tokens"] for r in replies if r.status_code == 200}
    assert len(counted) == 1 and counted.pop() > 200_000  # each admitted one counted the whole prompt
    small = httpx.post(server.url + "/v1/messages/count_tokens", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert small.status_code == 200 and small.json()["input_tokens"] > 0
