"""Prefix reuse and batched decode through the real server over HTTP, the official
clients as clients: two entries on the same model folder, one with the prefix cache
(the default) and one without (``prefix_cache_mib: 0``), answer alike at temperature
0 — across turns with tools, after a client left mid-prompt or mid-reply, after a
refused prompt, and beside a stream that leaves its batch."""

from __future__ import annotations

import concurrent.futures
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.greedy import Step, agreed
from tests.support.server import RunningServer, config_from_yaml, serve

openai = pytest.importorskip("openai", reason="the test extra installs the official openai client")
anthropic = pytest.importorskip("anthropic", reason="the test extra installs the official anthropic client")
ollama = pytest.importorskip("ollama", reason="the test extra installs the official ollama client")

NOTES = " ".join(f"Note {i}: the lighthouse keeper counted {i * 7} ships passing at dusk." for i in range(60))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]  # fmt: skip


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[RunningServer]:
    entry = f'backend: onnx, path: "{model_dir}", provider: cpu, context_length: 2048'
    config = config_from_yaml(f"models:\n  - {{name: reuse, {entry}}}\n  - {{name: cold, {entry}, prefix_cache_mib: 0}}\n")
    with serve(config) as running:
        yield running


@pytest.fixture(scope="module")
def oa(server: RunningServer) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def unique() -> str:
    return uuid.uuid4().hex  # first in a prompt: nothing cached by another test shares it


def ask(oa: Any, model: str, messages: list[dict[str, Any]], **extra: Any) -> tuple[tuple[Any, ...], Any]:
    reply = oa.chat.completions.create(model=model, messages=messages, temperature=0, **{"max_tokens": 16, **extra})
    message = reply.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    return (message.content, calls, reply.choices[0].finish_reason), reply.usage


def test_turns_with_tools_answer_as_without_reuse_in_each_dialect(server: RunningServer, oa: Any) -> None:
    system = f"{unique()} You are helpful. {NOTES[:700]}"
    history: list[dict[str, Any]] = [{"role": "system", "content": system}]
    cached = []
    for question in ("What is the weather in Paris?", "What did the keeper count at note 4?", "Say it in one sentence."):
        history.append({"role": "user", "content": question})
        (got, usage), (expected, _) = ask(oa, "reuse", history, tools=TOOLS), ask(oa, "cold", history, tools=TOOLS)
        assert got == expected
        cached.append(usage.prompt_tokens_details.cached_tokens)
        content, calls, _ = got
        if calls:  # the call and its result go into the history, as an agent sends them
            history.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": calls[0][0], "arguments": calls[0][1]}}]})  # fmt: skip
            history.append({"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"})
        else:
            history.append({"role": "assistant", "content": content})
    assert all(c > 150 for c in cached[1:]), cached  # the earlier turns came from the cache

    ol, an = ollama.Client(host=server.url), anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    system = f"{unique()} Be brief. {NOTES[:500]}"
    native: list[dict[str, Any]] = [{"role": "system", "content": system}]
    messages: list[dict[str, Any]] = []
    for question in ("Who counted ships?", "How many at note 5?"):
        native.append({"role": "user", "content": question})
        options = {"temperature": 0, "num_predict": 12}
        got_ol, expected_ol = (ol.chat(model=m, messages=native, options=options).message.content for m in ("reuse", "cold"))
        assert got_ol == expected_ol
        native.append({"role": "assistant", "content": got_ol})
        messages.append({"role": "user", "content": question})
        got_an, expected_an = (
            an.messages.create(model=m, max_tokens=12, system=system, messages=messages, extra_body={"temperature": 0})
            for m in ("reuse", "cold")
        )
        assert [c.model_dump() for c in got_an.content] == [c.model_dump() for c in expected_an.content]
        messages.append({"role": "assistant", "content": got_an.content[0].text})
    assert got_an.usage.cache_read_input_tokens > 100


def leave(server: RunningServer, body: dict[str, Any], *, pieces: int, linger: float = 0.0) -> None:
    """Stream ``body`` and disconnect after ``pieces`` content deltas (0: after the role
    chunk, while the prompt is being evaluated) and ``linger`` seconds."""
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as reply:
        seen = 0
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                seen += bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
                if seen >= pieces:
                    time.sleep(linger)
                    return


def test_a_client_that_left_or_was_refused_changes_no_later_answer(server: RunningServer, oa: Any) -> None:
    long = [{"role": "user", "content": f"{unique()} {NOTES} How many notes are there?"}]
    leave(server, {"model": "reuse", "messages": long, "max_tokens": 16, "temperature": 0}, pieces=0, linger=0.5)
    (got, usage), (expected, _) = ask(oa, "reuse", long), ask(oa, "cold", long)
    assert got == expected

    story = [{"role": "user", "content": f"{unique()} {NOTES[:800]} Write a long story about the keeper."}]
    leave(server, {"model": "reuse", "messages": story, "max_tokens": 60, "temperature": 0}, pieces=5)
    with pytest.raises(openai.BadRequestError, match="context length"):  # the same start, too long: refused
        ask(oa, "reuse", [{"role": "user", "content": story[0]["content"] + NOTES * 2}])
    (got, usage), (expected, _) = ask(oa, "reuse", story, max_tokens=40), ask(oa, "cold", story, max_tokens=40)
    assert got == expected
    assert usage.prompt_tokens_details.cached_tokens > 150


def stream_steps(oa: Any, model: str, body: dict[str, Any]) -> tuple[str, list[Step]]:
    """The streamed text and its tokens, each with its two best candidates."""
    text, steps = "", []
    for chunk in oa.chat.completions.create(model=model, stream=True, logprobs=True, top_logprobs=2,
                                            **{"temperature": 0, **body}):  # fmt: skip
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for token in (choice.logprobs.content if choice.logprobs else None) or []:
                steps.append(Step(token.token, tuple((t.token, t.logprob) for t in token.top_logprobs)))
    return text, steps


def test_a_stream_that_leaves_its_batch_disturbs_none_of_the_others(server: RunningServer, oa: Any) -> None:
    """Per-request stop strings, JSON mode, seeds and lengths in one batch, one stream
    cut off meanwhile: each answer is the one it gets alone, token for token up to a
    near tie that kernel rounding may tip (tests/support/greedy.py)."""
    requests = {
        "long": {"messages": [{"role": "user", "content": "Write about a dragon."}], "max_tokens": 40},
        "stop": {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 20, "stop": ["Par"]},
        "json": {"messages": [{"role": "user", "content": "A JSON object with a city."}], "max_tokens": 24,
                 "response_format": {"type": "json_object"}},
        "seeded": {"messages": [{"role": "user", "content": "Tell me about cats."}], "max_tokens": 16, "temperature": 0.9, "seed": 5},
        "short": {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3},
    }  # fmt: skip
    alone = {name: stream_steps(oa, "cold", body) for name, body in requests.items()}
    victim = {"model": "reuse", "messages": [{"role": "user", "content": "Count to a hundred."}], "max_tokens": 100, "temperature": 0}
    with concurrent.futures.ThreadPoolExecutor(len(requests) + 1) as pool:
        futures = {name: pool.submit(stream_steps, oa, "reuse", body) for name, body in requests.items()}
        pool.submit(leave, server, victim, pieces=4).result()
        together = {name: future.result() for name, future in futures.items()}
    for name, (_, steps) in together.items():
        if name == "seeded":  # its first token comes from its own prefill, exact; after it rounding can tip a draw
            assert steps[0].token == alone[name][1][0].token
        else:
            agreed(alone[name][1], [s.token for s in steps])
    assert "Par" not in together["stop"][0] and together["json"][0].startswith("{")
