"""Two replicas as they are deployed (issue 28): two ``dragoman serve`` processes, each
with two server processes (``workers: 2``), on two ports, sharing one real PostgreSQL (the
stored Responses) and one real Redis (per-key limits), in front of one upstream. Official
``openai`` client: a response stored through one replica is retrieved, listed and
continued through the other; a key's rpm holds across both together; one replica killed
with SIGKILL in the middle of a stream loses nothing the other stored or serves."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.postgres import Postgres, postgres_server
from tests.support.redis_server import RedisServer, redis_server
from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.serve_process import Served, dragoman_serve

CONFIG = """\
server:
  workers: 2
  redis: {redis}
  responses: {{kind: postgres, url: "{postgres}"}}
  api_keys:
    - key-a
    - {{key: key-limited, name: limited, rpm: 4}}
models:
  - name: fleet
    backend: openai
    base_url: {upstream}/v1
  - name: slow
    backend: openai
    base_url: {upstream}/v1
"""


@pytest.fixture(scope="module")
def services() -> Iterator[tuple[Postgres, RedisServer, ReplayServer]]:
    script: dict[str, Reply | list[Reply]] = {"fleet": Reply("openai/vllm_text.json"),
                                               "slow": Reply("openai/vllm_text.sse", delay_between=0.3)}
    with postgres_server() as postgres, redis_server() as redis, replay_server(script) as upstream:
        yield postgres, redis, upstream


@pytest.fixture(scope="module")
def config(services: tuple[Postgres, RedisServer, ReplayServer], tmp_path_factory: pytest.TempPathFactory) -> Path:
    postgres, redis, upstream = services
    path = tmp_path_factory.mktemp("replicas") / "dragoman.yaml"
    path.write_text(CONFIG.format(redis=redis.url, postgres=postgres.database("replicas"), upstream=upstream.url))
    return path


@pytest.fixture(scope="module")
def second(config: Path) -> Iterator[Served]:
    with dragoman_serve(config) as served:
        yield served


def client(served: Served, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0)


def test_replicas_share_stored_responses_and_limits_and_survive_a_sigkill(config: Path, second: Served) -> None:
    with dragoman_serve(config) as first:
        # Stored through one replica, continued through the other (each request may land
        # on either of a replica's two server processes).
        stored = client(first).responses.create(model="fleet", input="remember 42")
        follow = client(second).responses.create(model="fleet", input="what was it?", previous_response_id=stored.id)
        assert client(first).responses.retrieve(follow.id).previous_response_id == stored.id
        items = client(second).responses.input_items.list(follow.id, order="asc").data
        assert [i.content[0].text for i in items if i.type == "message"][0] == "remember 42"  # type: ignore[union-attr]

        # rpm 4 a minute, counted in Redis by four server processes together.
        for served in (first, second, first, second):
            client(served, "key-limited").chat.completions.create(model="fleet", messages=[{"role": "user", "content": "hi"}])
        for served in (first, second):
            with pytest.raises(openai.RateLimitError):
                client(served, "key-limited").chat.completions.create(model="fleet", messages=[{"role": "user", "content": "hi"}])

        # A replica killed mid-stream: the other still has everything and keeps serving.
        before = client(second).responses.create(model="fleet", input="stored before the kill")
        stream = client(first).chat.completions.create(model="slow", messages=[{"role": "user", "content": "hi"}], stream=True)
        chunks = iter(stream)
        next(chunks)
        killer = threading.Timer(0.2, first.kill_all)
        killer.start()
        with pytest.raises((openai.APIError, httpx.HTTPError)):
            for _ in chunks:
                pass
        killer.join()
    assert client(second).responses.retrieve(stored.id).id == stored.id
    assert client(second).responses.retrieve(before.id).id == before.id
    assert client(second).responses.create(model="fleet", input="still here?", previous_response_id=before.id).id
