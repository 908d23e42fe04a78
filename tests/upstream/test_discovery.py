"""``/v1/models`` and ``/api/tags`` list configured upstream models and, with
``discover: true``, the upstream's own models that the entry routes, cached for a TTL."""

from __future__ import annotations

import time

import httpx
import openai

from tests.support.replay import ReplayServer, Reply
from tests.support.replay_gateway import replay_gateway
from tests.support.server import RunningServer, free_port


SCRIPT: dict[str, Reply | list[Reply]] = {"/v1/models": Reply("openai/models.json"), "/api/tags": Reply("ollama/tags.json")}


def gateway_config(upstream: ReplayServer) -> str:
    return f"""\
    models:
      - {{name: configured, backend: openai, base_url: "{upstream.url}/v1"}}
      - {{name: "qwen*", backend: openai, base_url: "{upstream.url}/v1", discover: true, discover_ttl: 0.5}}
      - {{name: "llama*", backend: ollama, base_url: "{upstream.url}", discover: true}}
      - {{name: "gone-*", backend: ollama, base_url: "http://127.0.0.1:{free_port()}", discover: true}}
      - {{name: "quiet-*", backend: openai, base_url: "{upstream.url}/v1"}}
    """


upstream, gateway = replay_gateway(SCRIPT, gateway_config)


def listed(gateway: RunningServer) -> list[str]:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    return [model.id for model in client.models.list()]


def test_configured_and_discovered_models_are_listed(gateway: RunningServer) -> None:
    # "Qwen/Qwen3-8B" and "qwen3:0.6b" are upstream models too, but "qwen*" does not
    # route "Qwen/Qwen3-8B", and the Ollama entry is "llama*": only routable names.
    assert listed(gateway) == ["configured", "qwen3-lora-sql", "llama3.2:1b"]


def test_ollama_tags_carry_the_upstreams_details(gateway: RunningServer) -> None:
    tags = {m["name"]: m for m in httpx.get(gateway.url + "/api/tags").json()["models"]}
    assert set(tags) == {"configured", "qwen3-lora-sql", "llama3.2:1b"}
    details = tags["llama3.2:1b"]["details"]
    assert (details["family"], details["parameter_size"], details["quantization_level"]) == ("llama", "1.2B", "Q8_0")
    assert tags["llama3.2:1b"]["size"] == 1321098329


def test_discovery_is_cached_for_its_ttl(gateway: RunningServer, upstream: ReplayServer) -> None:
    def fetches() -> int:
        return sum(1 for r in upstream.received if r.path == "/v1/models")

    with httpx.Client(base_url=gateway.url) as client:  # one client: six listings well within the 0.5 s TTL
        client.get("/v1/models")
        before = fetches()
        for _ in range(5):
            client.get("/v1/models")
        assert fetches() == before  # within the TTL: from the cache
        time.sleep(0.6)
        client.get("/v1/models")
    assert fetches() == before + 1
