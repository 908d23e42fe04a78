"""Embedding requests are admitted like chats: with no ``max_concurrent`` configured,
eight of one model run at once (the backend batches them together), ``max_queue`` more
wait and the rest get a 503 with ``Retry-After`` in the caller's dialect (before: every
request was taken; a hundred large ones queued ten minutes of work). Real model
(all-minilm), real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dragoman.proxy.models import EMBED_CONCURRENT
from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "all-minilm"


@pytest.fixture(scope="module")
def server(embedding_model_dir: Path) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        server:
          limits: {{max_queue: 1}}
        models:
          - name: {MODEL}
            backend: onnx
            task: embed
            path: {embedding_model_dir}
            provider: cpu
        """
    )
    with serve(config) as running:
        yield running


@pytest.mark.parametrize(("path", "field"), [("/api/embed", "input"), ("/v1/embeddings", "input")])
def test_embedding_requests_beyond_the_queue_are_refused(server: RunningServer, path: str, field: str) -> None:
    body = {"model": MODEL, field: ["word " * 40] * 64}
    many = EMBED_CONCURRENT + 1 + 3  # running, one in line, three over

    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            return list(await asyncio.gather(*(client.post(path, json=body) for _ in range(many))))

    replies = asyncio.run(flood())
    statuses = sorted(r.status_code for r in replies)
    assert statuses.count(200) >= EMBED_CONCURRENT + 1 and 503 in statuses, statuses
    refused = next(r for r in replies if r.status_code == 503)
    assert refused.headers["retry-after"] == "1" and "is busy" in refused.text
    done = next(r for r in replies if r.status_code == 200).json()
    assert len(done["embeddings"] if path == "/api/embed" else done["data"]) == 64
    assert httpx.post(server.url + path, json={"model": MODEL, field: "hi"}).status_code == 200  # and after it
