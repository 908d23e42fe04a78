"""An upstream's prompt-cache figures reach a client of every dialect, over real HTTP.

The two upstreams report the same reply of the same prompt: Anthropic with its
``input_tokens`` after the cache read and write (``claude_prompt_cache``), OpenRouter in
OpenAI's dialect with both counted in ``prompt_tokens`` (``openrouter_prompt_cache``; the
usage blocks are as the Anthropic and OpenRouter documentation show them, on the replies
of the other transcripts). Every client gets the same figures from either: the whole
prompt is 14 + 1,210 written + 2,087 read = 3,311 tokens, never a part counted twice.
"""

from __future__ import annotations

import time

import anthropic
import ollama
import openai
import pytest
import structlog

from tests.support.server import RunningServer
from tests.upstream.conftest import user

PROMPT, READ, WRITTEN, OUTPUT = 3311, 2087, 1210, 9
ANTHROPIC_USAGE = {"input_tokens": PROMPT - READ - WRITTEN, "cache_creation_input_tokens": WRITTEN,
                   "cache_read_input_tokens": READ, "output_tokens": OUTPUT}  # fmt: skip
UPSTREAMS = ["an-cache", "oa-cache"]


def counts(usage: object, fields: dict[str, int]) -> dict[str, int | None]:
    return {name: getattr(usage, name) for name in fields}


@pytest.mark.parametrize("model", UPSTREAMS)
def test_anthropic_client_gets_reads_and_writes_apart(gateway: RunningServer, model: str) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    whole = client.messages.create(model=model, max_tokens=64, messages=user())
    assert counts(whole.usage, ANTHROPIC_USAGE) == ANTHROPIC_USAGE
    with client.messages.stream(model=model, max_tokens=64, messages=user()) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].text == "The capital of France is Paris."
    assert counts(streamed.usage, ANTHROPIC_USAGE) == ANTHROPIC_USAGE


def test_anthropic_message_start_splits_the_counts_it_knows(gateway: RunningServer) -> None:
    """Claude Code reads message_start's counts: from an Anthropic upstream they are known there."""
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    with client.messages.stream(model="an-cache", max_tokens=64, messages=user()) as stream:
        first = next(e for e in stream if e.type == "message_start")
        stream.get_final_message()
    want = {name: n for name, n in ANTHROPIC_USAGE.items() if name != "output_tokens"}
    assert counts(first.message.usage, want) == want


@pytest.mark.parametrize("model", UPSTREAMS)
def test_openai_clients_get_the_whole_prompt_and_the_reads(gateway: RunningServer, model: str) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    whole = client.chat.completions.create(model=model, messages=user()).usage
    *_, last = client.chat.completions.create(model=model, messages=user(), stream=True, stream_options={"include_usage": True})
    for usage in (whole, last.usage):
        assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (PROMPT, OUTPUT, PROMPT + OUTPUT)
        assert usage.prompt_tokens_details.cached_tokens == READ
    response = client.responses.create(model=model, input="hi").usage
    assert (response.input_tokens, response.input_tokens_details.cached_tokens, response.output_tokens) == (PROMPT, READ, OUTPUT)


@pytest.mark.parametrize("model", UPSTREAMS)
def test_ollama_client_gets_the_whole_prompt(gateway: RunningServer, model: str) -> None:
    reply = ollama.Client(host=gateway.url).chat(model=model, messages=user())
    assert (reply.prompt_eval_count, reply.eval_count) == (PROMPT, OUTPUT)


def test_the_access_log_counts_the_reads_and_the_writes(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    with structlog.testing.capture_logs() as logs:
        client.chat.completions.create(model="an-cache", messages=user())
        deadline = time.monotonic() + 10  # the line is written once the response has ended
        while not (lines := [e for e in logs if e.get("event") == "request" and e.get("model") == "an-cache"]):
            assert time.monotonic() < deadline, "no access log line"
            time.sleep(0.01)
    (line,) = lines
    assert (line["prompt_tokens"], line["cached_tokens"], line["cache_write_tokens"]) == (PROMPT, READ, WRITTEN)
