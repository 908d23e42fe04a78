"""Keep-alive frames while a stream is quiet (``server.stream_keepalive``, issue 27): a
long prefill sends nothing, so OpenAI streams get SSE comments and Anthropic streams
``ping`` events; the official clients read the reply through them. The scripted
backend's "prefill" script stands in for a prompt that takes a second to read."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

PREFILL = [{"role": "user", "content": "script:prefill"}]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = config_from_yaml(
        """\
        server:
          stream_keepalive: 0.2
        models:
          - {name: scripted, backend: "tests.support.scripted:ScriptedBackend", prefill: 1.0}
          - {name: quiet, backend: "tests.support.scripted:ScriptedBackend", prefill: 0.1}
        """
    )
    with serve(config) as running:
        yield running


def raw_stream(url: str, body: dict, headers: dict[str, str] | None = None) -> list[tuple[float, str]]:
    """Each SSE frame and when it came, from the start of the request."""
    began = time.monotonic()
    frames: list[tuple[float, str]] = []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as reply:
        assert reply.status_code == 200
        for frame in reply.iter_text():
            for part in frame.split("\n\n"):
                if part.strip():
                    frames.append((time.monotonic() - began, part.strip()))
    return frames


def test_openai_streams_send_comments_while_prefill_is_silent(server: RunningServer) -> None:
    body = {"model": "scripted", "messages": PREFILL, "stream": True}
    frames = raw_stream(server.url + "/v1/chat/completions", body)
    beats = [at for at, text in frames if text == ": keep-alive"]
    assert 3 <= len(beats) <= 6, frames
    assert all(b - a < 0.45 for a, b in zip(beats, beats[1:])), beats  # one each interval
    texts = [text for _, text in frames]
    assert texts[-1] == "data: [DONE]" and texts.index(": keep-alive") > 0  # after the role chunk
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(model="scripted", messages=PREFILL, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "read it"


def test_anthropic_streams_send_ping_events(server: RunningServer) -> None:
    body = {"model": "scripted", "max_tokens": 8, "messages": PREFILL, "stream": True}
    frames = raw_stream(server.url + "/v1/messages", body, {"anthropic-version": "2023-06-01"})
    pings = [text for _, text in frames if text.startswith("event: ping")]
    assert len(pings) >= 4, frames  # the one after message_start, then the keep-alives
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    with client.messages.stream(model="scripted", max_tokens=8, messages=PREFILL) as stream:  # type: ignore[arg-type]
        assert stream.get_final_text() == "read it"


def test_a_stream_that_keeps_talking_gets_none(server: RunningServer) -> None:
    frames = raw_stream(server.url + "/v1/chat/completions", {"model": "quiet", "messages": PREFILL, "stream": True})
    assert not [t for _, t in frames if t.startswith(":")]


def test_n_choices_get_them_too(server: RunningServer) -> None:
    frames = raw_stream(server.url + "/v1/chat/completions", {"model": "scripted", "messages": PREFILL, "stream": True, "n": 2})
    assert [t for _, t in frames].count(": keep-alive") >= 3


def test_ollama_ndjson_has_no_keepalive_line(server: RunningServer) -> None:
    with httpx.stream("POST", server.url + "/api/chat", json={"model": "scripted", "messages": PREFILL}, timeout=10) as reply:
        lines = [line for line in reply.iter_lines() if line]
    assert all(line.startswith("{") for line in lines) and len(lines) == 2  # the text, the final line
