"""Limits and usage per API key (proxy/key_limits.py): rpm, tpm, max_concurrent and the
models a key may use, answered before any work with 429 + Retry-After (or the dialect's
404) in the caller's dialect; counted in the process, or in a real Redis shared by two
servers; usage per key name in /metrics; Redis down is a 503 and it recovers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from litestar.testing import AsyncTestClient

from dragoman.backends.onnx.prepare import registry
from dragoman.config.schema import KeyPolicy
from dragoman.proxy.app import create_app
from dragoman.proxy.key_limits import KeyLimits, LocalCounters, RateLimited
from tests.support.redis_server import RedisServer, redis_server
from tests.support.server import RunningServer, config_from_yaml, serve

CONFIG = """\
server:
  {redis}
  api_keys:
    - plain-key
    - {{key: key-rpm, name: rpm-user, rpm: 2}}
    - {{key: key-models, name: models-user, models: ["scripted-*"]}}
    - {{key: key-tpm, name: tpm-user, tpm: 5}}
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
  - name: scripted-b
    backend: tests.support.scripted:ScriptedBackend
"""


def ask(server: RunningServer, key: str, model: str = "scripted") -> str:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize(
    ("policy", "model", "allowed"),
    [
        (KeyPolicy(key="k", name="n"), "anything", True),
        (KeyPolicy(key="k", name="n", models=["llama*", "qwen2.5:7b"]), "llama3.2:1b", True),
        (KeyPolicy(key="k", name="n", models=["llama*", "qwen2.5:7b"]), "qwen2.5:7b", True),
        (KeyPolicy(key="k", name="n", models=["llama*", "qwen2.5:7b"]), "qwen2.5:14b", False),
        (KeyPolicy(key="k", name="n", models=[]), "llama3", False),
    ],
)
def test_which_models_a_key_may_use(policy: KeyPolicy, model: str, allowed: bool) -> None:
    assert policy.allows(model) is allowed


async def test_limits_counted_in_the_process() -> None:
    now = [120.0]
    limits = KeyLimits([KeyPolicy(key="k", name="n", rpm=2, max_concurrent=1, tpm=100)], LocalCounters(lambda: now[0]),
                       clock=lambda: now[0])  # fmt: skip
    policy = limits.policy_for("k")
    assert policy is not None and limits.policy_for("other") is None
    await limits.begin(policy)
    with pytest.raises(RateLimited, match="max_concurrent"):
        await limits.begin(policy)  # one running
    await limits.end(policy, tokens=150)
    with pytest.raises(RateLimited, match="tpm") as over:
        await limits.begin(policy)  # the minute's tokens are spent
    assert over.value.status == 429 and over.value.retry_after == 61
    now[0] = 185.0  # the next minute
    await limits.begin(policy)
    await limits.end(policy, tokens=1)
    await limits.begin(policy)
    await limits.end(policy, tokens=1)
    with pytest.raises(RateLimited, match="rpm") as over:
        await limits.begin(policy)
    assert over.value.retry_after == 56


@pytest.fixture(scope="module")
def local() -> Iterator[RunningServer]:
    with serve(config_from_yaml(CONFIG.format(redis=""))) as server:
        yield server


def test_a_key_over_its_rpm_gets_a_429_with_retry_after_in_its_dialect(local: RunningServer) -> None:
    ask(local, "key-rpm")
    ask(local, "key-rpm")
    with pytest.raises(openai.RateLimitError) as limited:
        ask(local, "key-rpm")
    assert "rpm" in limited.value.message and int(limited.value.response.headers["retry-after"]) >= 1
    ask(local, "plain-key")  # other keys are not limited by it
    claude = anthropic.Anthropic(base_url=local.url, api_key="key-rpm", max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as refused:
        claude.messages.create(model="scripted", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_a_model_the_key_may_not_use_does_not_exist_for_it(local: RunningServer) -> None:
    assert ask(local, "key-models", "scripted-b")
    with pytest.raises(openai.NotFoundError) as missing:
        ask(local, "key-models", "scripted")
    assert "scripted" in missing.value.message
    reply = httpx.post(local.url + "/api/chat", headers={"authorization": "Bearer key-models"}, timeout=10,
                       json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": False})
    assert reply.status_code == 404 and "scripted" in reply.json()["error"]


def test_tokens_per_minute_and_usage_per_key_name(local: RunningServer) -> None:
    ask(local, "key-tpm")  # the scripted reply's prompt and generated tokens pass 5
    with pytest.raises(openai.RateLimitError, match="tpm"):
        ask(local, "key-tpm")
    metrics = httpx.get(local.url + "/metrics", headers={"authorization": "Bearer plain-key"}).text
    assert 'dragoman_key_requests_total{key="tpm-user",status="200"} 1.0' in metrics
    assert 'dragoman_key_requests_total{key="tpm-user",status="429"} 1.0' in metrics
    assert 'dragoman_key_tokens_total{direction="out",key="tpm-user"}' in metrics
    assert "key-tpm" not in metrics  # the name, never the key


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def replicas(redis: RedisServer) -> Iterator[tuple[RunningServer, RunningServer]]:
    config = config_from_yaml(CONFIG.format(redis=f"redis: {redis.url}"))
    with serve(config) as first, serve(config) as second:
        yield first, second


def test_two_servers_count_a_key_together_in_redis(replicas: tuple[RunningServer, RunningServer]) -> None:
    one, other = replicas
    ask(one, "key-rpm")
    ask(other, "key-rpm")
    with pytest.raises(openai.RateLimitError):
        ask(one, "key-rpm")  # the third of the minute, whichever server answers
    with pytest.raises(openai.RateLimitError):
        ask(other, "key-rpm")


def test_redis_down_is_a_503_and_it_recovers(replicas: tuple[RunningServer, RunningServer], redis: RedisServer) -> None:
    one, _ = replicas
    redis.stop()
    assert ask(one, "key-models", "scripted-b")  # a key with nothing to count does not need Redis
    with pytest.raises(openai.InternalServerError) as down:
        ask(one, "key-tpm")
    assert down.value.status_code == 503 and "Redis" in down.value.message
    redis.start()
    deadline = time.monotonic() + 20
    while True:
        try:
            ask(one, "key-tpm")
            break
        except openai.RateLimitError:
            break  # counted again: this minute's tokens were spent before
        except openai.InternalServerError:
            assert time.monotonic() < deadline, "no recovery"
            time.sleep(0.3)


async def test_a_stopped_app_closes_its_redis_connections(redis: RedisServer) -> None:
    """The lifespan closes the counters' connection pool: an app that stops (a reload, a
    replica scaled down) leaves no connection open in Redis, while the app object lives
    on (a test client, an embedding program)."""
    watcher = _redis_client(redis)
    before = len(watcher.client_list())
    config = CONFIG.format(redis=f"redis: {redis.url}").replace("- plain-key", "- {key: key-close, name: close-user, rpm: 100}")
    # Built without tests.support.server, which blanks the public registry: a local address
    # nothing answers, and the process-wide one is put back when the app stops.
    config = config.replace("server:\n", 'server:\n  registry: "http://127.0.0.1:9"\n')
    outer_registry = registry.address()
    app = create_app(config_from_yaml(config))
    async with AsyncTestClient(app, base_url="http://127.0.0.1") as client:
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        reply = await client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer key-close"})
        assert reply.status_code == 200, reply.text
        assert len(watcher.client_list()) > before  # the app's own connection
    deadline = time.monotonic() + 5
    while len(watcher.client_list()) > before:
        assert time.monotonic() < deadline, f"still open after the app stopped: {watcher.client_list()}"
        time.sleep(0.1)
    assert app  # alive: nothing was left to the garbage collector
    assert registry.address() == outer_registry


def _redis_client(server: RedisServer) -> Any:
    import redis as redis_py

    return redis_py.Redis.from_url(server.url)
