"""Every client dialect against every upstream dialect, streaming and not, through the
official clients, with recorded upstream transcripts on real HTTP."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import ollama
import openai
import pytest

from tests.support.server import RunningServer
from tests.upstream.conftest import user

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
WEATHER = ("get_weather", {"city": "Paris", "unit": "celsius"})
TIME = ("get_time", {"tz": "Europe/Paris"})


def openai_client(gateway: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)


def ollama_client(gateway: RunningServer) -> ollama.Client:
    return ollama.Client(host=gateway.url)


def openai_reply(gateway: RunningServer, model: str, stream: bool) -> dict[str, Any]:
    """What an OpenAI client ends up with: text, thinking, calls, finish, usage."""
    client = openai_client(gateway)
    if not stream:
        reply = client.chat.completions.create(model=model, messages=user(), tools=TOOLS)
        message = reply.choices[0].message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
        thinking = (message.model_extra or {}).get("reasoning_content") or ""
        usage = (reply.usage.prompt_tokens, reply.usage.completion_tokens)
        return {"text": message.content or "", "thinking": thinking, "calls": calls,
                "finish": reply.choices[0].finish_reason, "usage": usage, "model": reply.model}
    text, thinking, finish, usage, model_seen = "", "", None, None, None
    fragments: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    chunks = client.chat.completions.create(
        model=model, messages=user(), tools=TOOLS, stream=True, stream_options={"include_usage": True}
    )
    for chunk in chunks:
        model_seen = chunk.model
        if chunk.usage:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            delta = choice.delta
            text += delta.content or ""
            thinking += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                fragments.setdefault(call.index, []).append((call.function and call.function.arguments) or "")
            finish = choice.finish_reason or finish
    calls = [(names[i], json.loads("".join(fragments[i]))) for i in sorted(fragments)]
    return {"text": text, "thinking": thinking, "calls": calls, "finish": finish, "usage": usage, "model": model_seen}


def ollama_reply(gateway: RunningServer, model: str, stream: bool) -> dict[str, Any]:
    client = ollama_client(gateway)
    parts = list(client.chat(model=model, messages=user(), tools=TOOLS, stream=True)) if stream else [
        client.chat(model=model, messages=user(), tools=TOOLS)
    ]
    last = parts[-1]
    calls = [(c.function.name, dict(c.function.arguments)) for p in parts for c in p.message.tool_calls or []]
    return {
        "text": "".join(p.message.content or "" for p in parts),
        "thinking": "".join(p.message.thinking or "" for p in parts),
        "calls": calls,
        "finish": last.done_reason,
        "usage": (last.prompt_eval_count, last.eval_count),
        "model": last.model,
    }


HELLO = "Hello! How can I help you today?"
CASES = [
    # (name, client, model, expected)
    ("openai->openai text", "openai", "oa-text", {"text": HELLO, "finish": "stop", "usage": (12, 10)}),
    ("ollama->openai text", "ollama", "oa-text", {"text": HELLO, "finish": "stop", "usage": (12, 10)}),
    ("openai->openai reasoning", "openai", "oa-reasoning", {"thinking": "Okay, the user greets me.", "text": "Hi there!"}),
    ("ollama->openai reasoning", "ollama", "oa-reasoning", {"thinking": "Okay, the user greets me.", "text": "Hi there!"}),
    ("openai->openai tools", "openai", "oa-tools", {"calls": [WEATHER, TIME], "finish": "tool_calls", "usage": (82, 46)}),
    ("ollama->openai tools", "ollama", "oa-tools", {"calls": [WEATHER, TIME], "finish": "stop", "text": ""}),
    ("openai->ollama thinking", "openai", "ol-thinking", {"thinking": "Okay, a greeting.", "text": "Hello! How can I help?", "usage": (18, 12)}),
    ("ollama->ollama thinking", "ollama", "ol-thinking", {"thinking": "Okay, a greeting.", "text": "Hello! How can I help?", "usage": (18, 12)}),
    ("openai->ollama tools", "openai", "ol-tools", {"calls": [WEATHER, TIME], "finish": "tool_calls", "usage": (96, 40)}),
    ("ollama->ollama tools", "ollama", "ol-tools", {"calls": [WEATHER, TIME], "finish": "stop"}),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("name", "client", "model", "expected"), CASES, ids=[c[0] for c in CASES])
def test_client_through_upstream(
    gateway: RunningServer, name: str, client: str, model: str, expected: dict[str, Any], stream: bool
) -> None:
    got = (openai_reply if client == "openai" else ollama_reply)(gateway, model, stream)
    assert got["model"] == model  # the client sees the name it asked for, not the upstream's
    assert {key: got[key] for key in expected} == expected


def test_fragmented_calls_reach_ollama_clients_as_soon_as_each_is_whole(
    gateway: RunningServer, openai_upstream: Any
) -> None:
    """The first call is complete when the second one starts; it must not wait for the
    end of the stream (the replay sends one event every 50 ms)."""
    from tests.support.replay import Reply

    openai_upstream.script["oa-tools-slowly"] = Reply("openai/gpt4o_parallel_tool_calls.sse", delay_between=0.05)
    arrivals: list[tuple[float, dict[str, Any]]] = []
    body = {"model": "oa-tools-slowly", "messages": user(), "tools": TOOLS}
    with httpx.stream("POST", gateway.url + "/api/chat", json=body, timeout=10) as response:
        for line in response.iter_lines():
            arrivals.append((time.monotonic(), json.loads(line)))
    with_calls = [(t, line["message"]["tool_calls"]) for t, line in arrivals if line["message"].get("tool_calls")]
    assert [[(c["function"]["name"], c["function"]["arguments"]) for c in calls] for _, calls in with_calls] == [
        [WEATHER], [TIME]
    ]
    assert [c["function"]["index"] for _, calls in with_calls for c in calls] == [0, 1]
    first_call_at, done_at = with_calls[0][0], arrivals[-1][0]
    assert done_at - first_call_at > 0.2  # 6 more events × 50 ms were still to come
    assert arrivals[-1][1]["done"] is True


def test_openai_clients_get_fragments_as_they_come(gateway: RunningServer) -> None:
    """OpenAI clients expect fragments: they are forwarded, not held back."""
    chunks = list(openai_client(gateway).chat.completions.create(model="oa-tools", messages=user(), tools=TOOLS, stream=True))
    fragments = [c.function.arguments for ch in chunks for ch_choice in ch.choices for c in ch_choice.delta.tool_calls or []]
    assert len(fragments) > 2 and "".join(fragments) == '{"city": "Paris", "unit": "celsius"}{"tz": "Europe/Paris"}'


@pytest.mark.parametrize(("coalesce", "content_chunks"), [(True, 1), (False, 9)], ids=["coalesced", "as sent"])
def test_deltas_that_arrive_together_go_out_together(openai_upstream: Any, coalesce: bool, content_chunks: int) -> None:
    from tests.support.replay import Reply
    from tests.support.server import config_from_yaml, serve

    openai_upstream.script["oa-burst"] = Reply("openai/vllm_text.sse", burst=True)
    config = config_from_yaml(
        f"""\
        models:
          - {{name: oa-burst, backend: openai, base_url: "{openai_upstream.url}/v1", coalesce: {str(coalesce).lower()}}}
        """
    )
    with serve(config) as gateway:
        chunks = list(openai_client(gateway).chat.completions.create(model="oa-burst", messages=user(), stream=True))
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == HELLO and len(texts) == content_chunks
