"""Prompt-cache hits of the real default model (the ONNX batch engine's prefix cache)
reported over HTTP in each dialect's own field, as the official clients parse them: two
requests sharing a long system prompt, the second reads it from the cache."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
import structlog.testing
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import RunningServer

openai = pytest.importorskip("openai", reason="the test extra installs the official openai client")
anthropic = pytest.importorskip("anthropic", reason="the test extra installs the official anthropic client")

MODEL = "smollm2:135m"
RULES = " ".join(f"Rule {n}: answer in plain words, keep to the facts of note {n}, and never guess." for n in range(1, 13))


def system_prompt() -> str:
    # Unique per test, so the first request cannot hit what another test left cached.
    return f"You are a careful assistant (session {uuid.uuid4().hex}). {RULES}"


@pytest.fixture(scope="module")
def openai_client(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def anthropic_client(real_server: RunningServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=real_server.url, api_key="unused", max_retries=0)


def test_openai_chat_reports_the_shared_system_prompt_as_cached(openai_client: openai.OpenAI) -> None:
    system = system_prompt()

    def ask(question: str, **extra: object) -> object:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        return openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0, **extra)

    first = ask("What is rule 3?")
    second = ask("Which rule talks about note 7?")
    assert first.usage is not None and second.usage is not None
    cold, warm = first.usage.prompt_tokens_details.cached_tokens, second.usage.prompt_tokens_details.cached_tokens
    assert warm > 200 and warm > cold  # the system prompt (~250 tokens) came from the cache
    assert warm < second.usage.prompt_tokens  # counted in prompt_tokens, the question was not
    stream = ask("And rule 12?", stream=True, stream_options={"include_usage": True})
    *_, last = list(stream)
    assert last.choices == [] and last.usage.prompt_tokens_details.cached_tokens > 200


def test_anthropic_reports_cache_reads_apart_from_input_tokens(anthropic_client: anthropic.Anthropic) -> None:
    system = system_prompt()

    def ask(question: str) -> dict[str, object]:
        return {"model": MODEL, "max_tokens": 4, "system": system, "messages": [{"role": "user", "content": question}],
                "extra_body": {"top_k": 1}}  # fmt: skip

    first = anthropic_client.messages.create(**ask("What is rule 3?"))
    second = anthropic_client.messages.create(**ask("Which rule talks about note 7?"))
    assert second.usage.cache_read_input_tokens > 200 and second.usage.cache_read_input_tokens > (first.usage.cache_read_input_tokens or 0)
    assert second.usage.cache_creation_input_tokens == 0
    # Anthropic's meaning: input_tokens are those after the cache read; the sum is the prompt
    counted = anthropic_client.messages.count_tokens(model=MODEL, system=system, messages=[{"role": "user", "content": "Which rule talks about note 7?"}])
    assert 0 < second.usage.input_tokens < 50
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == counted.input_tokens
    with anthropic_client.messages.stream(**ask("And rule 12?")) as stream:
        final = stream.get_final_message()  # the SDK takes the counts from message_delta
    assert final.usage.cache_read_input_tokens > 200 and 0 < final.usage.input_tokens < 50


def cached_counter(server: RunningServer) -> float:
    families = text_string_to_metric_families(httpx.get(server.url + "/metrics").text)
    return sum(s.value for f in families for s in f.samples
               if s.name == "dragoman_cached_prompt_tokens_total" and s.labels["model"] == MODEL)  # fmt: skip


def test_the_access_log_and_metrics_count_the_cached_tokens(openai_client: openai.OpenAI, real_server: RunningServer) -> None:
    system = system_prompt()
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What is rule 3?"}]
    openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
    before = cached_counter(real_server)
    with structlog.testing.capture_logs() as logs:
        messages[-1]["content"] = "Which rule talks about note 7?"
        reply = openai_client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
        time.sleep(0.1)  # the line is written once the response has ended
    assert reply.usage is not None
    cached = reply.usage.prompt_tokens_details.cached_tokens
    assert cached > 200
    (line,) = [entry for entry in logs if entry.get("event") == "request" and entry.get("path") == "/v1/chat/completions"]
    assert (line["prompt_tokens"], line["cached_tokens"]) == (reply.usage.prompt_tokens, cached)
    assert cached_counter(real_server) - before == cached
