"""Prefix reuse on the library's Generator path (``engine: generator``, what CUDA and
DirectML run), through the real server over HTTP with the official clients: a kept
Generator continues the next turn of a chat, which reports the reused tokens, and every
answer at temperature 0 is the one of an entry that keeps nothing (``prefix_cache_mib:
0``) — across turns, after a client left mid-reply, with a grammar; sampling options
other than the kept Generator's, or a seed, start from nothing; the bound on entries
evicts the least recently used conversation."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.test_prefix_reuse import NOTES, leave
from tests.support.server import RunningServer, config_from_yaml, serve

openai = pytest.importorskip("openai", reason="the test extra installs the official openai client")
ollama = pytest.importorskip("ollama", reason="the test extra installs the official ollama client")


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[RunningServer]:
    entry = f'backend: onnx, path: "{model_dir}", provider: cpu, engine: generator, context_length: 2048'
    config = config_from_yaml(
        f"models:\n  - {{name: reuse, {entry}}}\n  - {{name: cold, {entry}, prefix_cache_mib: 0}}\n"
        f"  - {{name: one, {entry}, prefix_cache_entries: 1}}\n"
    )
    with serve(config) as running:
        yield running


@pytest.fixture(scope="module")
def oa(server: RunningServer) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def ask(oa: Any, model: str, messages: list[dict[str, Any]], **extra: Any) -> tuple[str, int, int]:
    """(content, prompt tokens, cached tokens) of a greedy answer."""
    reply = oa.chat.completions.create(model=model, messages=messages, **{"temperature": 0, "max_tokens": 24, **extra})
    usage = reply.usage
    return reply.choices[0].message.content, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens


def test_next_turns_continue_the_kept_generator_and_answer_as_a_cold_one(server: RunningServer, oa: Any) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": f"{uuid.uuid4().hex} Be brief. {NOTES[:900]}"}]
    previous_prompt = 0
    for turn, question in enumerate(("Who counted ships?", "How many at note 3?", "And at note 7?", "Say it again.")):
        history.append({"role": "user", "content": question})
        got, prompt, cached = ask(oa, "reuse", history)
        expected, _, cold_cached = ask(oa, "cold", history)
        assert got == expected, turn
        assert cold_cached == 0
        if turn:  # all of the previous prompt, less the tokens its end shares with the reply's start at most
            assert previous_prompt - 4 <= cached <= previous_prompt, (turn, cached, previous_prompt)
        else:
            assert cached == 0
        previous_prompt = prompt
        history.append({"role": "assistant", "content": got})

    # Ollama's dialect over the same conversation.
    ol = ollama.Client(host=server.url)
    native = [*history, {"role": "user", "content": "Thanks."}]
    answers = [ol.chat(model=m, messages=native, options={"temperature": 0, "num_predict": 16}).message.content
               for m in ("reuse", "cold")]  # fmt: skip
    assert answers[0] == answers[1]


def test_a_client_that_left_mid_reply_or_a_grammar_changes_no_answer(server: RunningServer, oa: Any) -> None:
    story = [{"role": "user", "content": f"{uuid.uuid4().hex} {NOTES[:800]} Write a long story about the keeper."}]
    leave(server, {"model": "reuse", "messages": story, "max_tokens": 60, "temperature": 0}, pieces=5)
    got, _, cached = ask(oa, "reuse", story, max_tokens=40)
    assert got == ask(oa, "cold", story, max_tokens=40)[0]
    assert cached > 150  # the prompt the client left came from the kept Generator

    asked = [*story, {"role": "assistant", "content": got}, {"role": "user", "content": "A JSON object with the keeper's name."}]
    json_mode = {"response_format": {"type": "json_object"}, "max_tokens": 30}
    got, _, cached = ask(oa, "reuse", asked, **json_mode)
    assert got == ask(oa, "cold", asked, **json_mode)[0]
    assert got.startswith("{") and cached > 150


def test_other_sampling_options_or_a_seed_start_from_nothing(oa: Any) -> None:
    messages = [{"role": "system", "content": f"{uuid.uuid4().hex} {NOTES[:600]}"},
                {"role": "user", "content": "Tell me about the keeper."}]  # fmt: skip
    assert ask(oa, "reuse", messages)[2] == 0
    assert ask(oa, "reuse", messages, temperature=0.5, top_p=0.9)[2] == 0  # another kind of Generator
    assert ask(oa, "reuse", messages)[2] > 150
    seeded = [ask(oa, "reuse", messages, temperature=0.9, seed=7) for _ in range(2)]
    assert seeded[0] == seeded[1] and seeded[0][2] == 0  # reproducible: never a kept Generator's random state


def test_the_entries_bound_evicts_the_least_recently_used_conversation(oa: Any) -> None:
    first, second = ([{"role": "system", "content": f"{uuid.uuid4().hex} {NOTES[:500]}"}, {"role": "user", "content": q}]
                     for q in ("Who?", "Why?"))  # fmt: skip
    for model, expected in (("reuse", True), ("one", False)):
        for conversation in (first, second):
            ask(oa, model, conversation)
        _, _, cached = ask(oa, model, first)
        assert (cached > 100) is expected, (model, cached)


def test_the_role_chunk_goes_out_while_the_prompt_is_evaluated(server: RunningServer) -> None:
    """The worker's Started is sent as it is made: before, it went out with the first
    token, after the prompt, and the server's work on it stood between the prompt and
    the first token."""
    body = {"model": "cold", "stream": True, "temperature": 0, "max_tokens": 2,
            "messages": [{"role": "user", "content": f"{uuid.uuid4().hex} {NOTES[:1200]} Summarise."}]}  # fmt: skip
    httpx.post(f"{server.url}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 1}, timeout=120)  # loaded
    body["messages"][0]["content"] = f"{uuid.uuid4().hex} {NOTES[:1200]} Summarise."
    arrived: dict[str, float] = {}
    sent = time.monotonic()
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {") and (choices := json.loads(line[6:])["choices"]):
                kind = "content" if choices[0]["delta"].get("content") else "role"
                arrived.setdefault(kind, time.monotonic())
    assert arrived["content"] - arrived["role"] > 0.5 * (arrived["content"] - sent), arrived
