"""A replay upstream of each dialect and a dragoman in front of both.

Pattern entries forward the requested name, so the model a test asks for is the key
of the replay script: ``oa-tools`` reaches the OpenAI replay server as ``oa-tools``.
Replies with a ``whole`` transcript answer non-streaming requests with it; the others
stream regardless, as some servers do, which the backend must read all the same.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, serve

IDLE_TIMEOUT = 0.5  # seconds; the "slow" replies stall longer than this
DEEP = b"[" * 5000 + b"]" * 5000  # past what msgspec can recurse into
SSE, JSON = {"Content-Type": "text/event-stream"}, {"Content-Type": "application/json"}

OPENAI_SCRIPT: dict[str, Reply | list[Reply]] = {
    "oa-text": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
    "oa-reasoning": Reply("openai/vllm_reasoning.sse", whole="openai/vllm_reasoning.json"),
    "oa-tools": Reply("openai/gpt4o_parallel_tool_calls.sse", whole="openai/gpt4o_parallel_tool_calls.json"),
    "oa-bad-args": Reply("openai/gpt4o_malformed_tool_arguments.sse"),
    "oa-malformed": Reply("openai/vllm_malformed_chunk.sse"),
    "oa-truncated": Reply("openai/vllm_text_truncated.sse"),
    "oa-abort": Reply("openai/vllm_text.sse", abort_after=4),
    "oa-slow": Reply("openai/vllm_text.sse", stall_after=4, stall=IDLE_TIMEOUT * 4),
    "oa-drip": Reply("openai/vllm_text.sse", delay_between=0.05),
    "oa-401": Reply("openai/error_401.json", status=401),
    "oa-403": Reply("openai/error_403.json", status=403),
    "oa-404": Reply("openai/error_404.json", status=404),
    "oa-429": Reply("openai/error_429.json", status=429, headers={"Retry-After": "7"}),
    "oa-503": Reply("openai/error_503.json", status=503, headers={"Retry-After": "3"}),
    "oa-completion": Reply("openai/vllm_completion.sse", whole="openai/vllm_completion.json"),
    "oa-completion-logprobs": Reply("openai/vllm_completion_logprobs.sse", whole="openai/vllm_completion_logprobs.json"),
    "oa-no-suffix": Reply("openai/vllm_suffix_unsupported.json", status=400),
    "oa-cache": Reply("openai/openrouter_prompt_cache.sse", whole="openai/openrouter_prompt_cache.json"),
    "/v1/models": Reply("openai/models.json"),
}

OLLAMA_SCRIPT: dict[str, Reply | list[Reply]] = {
    "ol-thinking": Reply("ollama/qwen3_thinking.ndjson", whole="ollama/qwen3_thinking.json"),
    "ol-tools": Reply("ollama/qwen3_tool_calls.ndjson", whole="ollama/qwen3_tool_calls.json"),
    "ol-truncated": Reply("ollama/qwen3_truncated.ndjson"),
    "ol-malformed": Reply("ollama/qwen3_malformed_line.ndjson"),
    "ol-crash": Reply("ollama/qwen3_runner_crash.ndjson"),
    "ol-slow": Reply("ollama/qwen3_thinking.ndjson", stall_after=6, stall=IDLE_TIMEOUT * 4),
    "ol-404": Reply("ollama/error_404.json", status=404),
    "ol-generate-raw": Reply("ollama/generate_raw.ndjson", whole="ollama/generate_raw.json"),
    "ol-generate-text": Reply("ollama/generate_text.ndjson", whole="ollama/generate_text.json"),
    "ol-no-insert": Reply("ollama/generate_no_insert.json", status=400),
    "/api/tags": Reply("ollama/tags.json"),
}


ANTHROPIC_SCRIPT: dict[str, Reply | list[Reply]] = {
    "an-text": Reply("anthropic/claude_text.sse", whole="anthropic/claude_text.json"),
    "an-tools": Reply("anthropic/claude_thinking_tool_use.sse", whole="anthropic/claude_thinking_tool_use.json"),
    "an-stop": Reply("anthropic/claude_stop_sequence.sse"),
    "an-max": Reply("anthropic/claude_max_tokens.sse"),
    "an-midstream": Reply("anthropic/claude_midstream_overloaded.sse"),
    "an-529": Reply("anthropic/error_overloaded.json", status=529, headers={"Retry-After": "4"}),
    "an-400": Reply("anthropic/error_invalid.json", status=400),
    "an-401": Reply("anthropic/error_auth.json", status=401),
    "an-count": Reply("anthropic/count_tokens.json"),
    "an-cache": Reply("anthropic/claude_prompt_cache.sse", whole="anthropic/claude_prompt_cache.json"),
    "an-deep": Reply(body=b'event: message_start\ndata: {"type":"message_start","message":{"x":%s}}\n\n' % DEEP, headers=SSE),
    "an-deep-whole": Reply(body=b'{"type":"message","content":[],"x":%s}' % DEEP, headers=JSON),
    "an-count-deep": Reply(body=b'{"input_tokens":1,"x":%s}' % DEEP, headers=JSON),
    "/v1/models": Reply("anthropic/models.json"),
}

RESPONSES_SCRIPT: dict[str, Reply | list[Reply]] = {
    "rs-text": Reply("responses/gpt_text.sse", whole="responses/gpt_text.json"),
    "rs-tools": Reply("responses/gpt_reasoning_function_calls.sse", whole="responses/gpt_reasoning_function_calls.json"),
    "rs-incomplete": Reply("responses/gpt_incomplete.sse"),
    "rs-failed": Reply("responses/gpt_failed.sse"),
    "rs-400": Reply("responses/error_400.json", status=400),
    "rs-deep": Reply(body=b'data: {"type":"response.created","response":{"x":%s}}\n\n' % DEEP, headers=SSE),
    "rs-deep-whole": Reply(body=b'{"id":"r","status":"completed","output":[],"x":%s}' % DEEP, headers=JSON),
    "/v1/models": Reply("openai/models.json"),
}


@pytest.fixture(scope="module")
def anthropic_upstream() -> Iterator[ReplayServer]:
    with replay_server(ANTHROPIC_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def responses_upstream() -> Iterator[ReplayServer]:
    with replay_server(RESPONSES_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def openai_upstream() -> Iterator[ReplayServer]:
    with replay_server(OPENAI_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def ollama_upstream() -> Iterator[ReplayServer]:
    with replay_server(OLLAMA_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(
    openai_upstream: ReplayServer, ollama_upstream: ReplayServer, anthropic_upstream: ReplayServer,
    responses_upstream: ReplayServer,
) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - name: "oa-*"
            backend: openai
            base_url: {openai_upstream.url}/v1
            idle_timeout: {IDLE_TIMEOUT}
          - name: "ol-*"
            backend: ollama
            base_url: {ollama_upstream.url}
            idle_timeout: {IDLE_TIMEOUT}
          - name: "an-*"
            backend: anthropic
            base_url: {anthropic_upstream.url}
            api_key: sk-ant-test
            idle_timeout: {IDLE_TIMEOUT}
          - name: "rs-*"
            backend: openai
            api: responses
            base_url: {responses_upstream.url}/v1
            idle_timeout: {IDLE_TIMEOUT}
        """
    )
    with serve(config) as server:
        yield server


def user(text: str = "hi") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]
