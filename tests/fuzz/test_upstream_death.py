"""The upstream dies (SIGKILL) in the middle of a stream a client is reading through a
dragoman ``openai`` or ``ollama`` backend: the client gets an error event and a clean
end of its stream, and the gateway stays healthy and serves the next requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fuzz.processes import ServerProcess, dragoman_process
from tests.fuzz.frames import ndjson_lines, sse_payloads
from tests.support.server import RunningServer, config_from_yaml, free_port, serve

UPSTREAM_CONFIG = """\
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
    delay: 0.05
"""


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def upstream_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def gateway(upstream_port: int) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - name: via-openai
            backend: openai
            base_url: http://127.0.0.1:{upstream_port}/v1
            model: scripted
          - name: via-ollama
            backend: ollama
            base_url: http://127.0.0.1:{upstream_port}
            model: scripted
          - name: local
            backend: tests.support.scripted:ScriptedBackend
        """
    )
    with serve(config) as server:
        yield server


@pytest.fixture
def upstream(upstream_port: int, tmp_path: Path) -> Iterator[ServerProcess]:
    with dragoman_process(UPSTREAM_CONFIG, upstream_port, tmp_path) as server:
        yield server


def openai_frames(raw: bytes) -> tuple[str, list[str]]:
    """The text and the error messages of an SSE stream (checked well framed, ending
    with ``data: [DONE]``); an error must be the last event before it."""
    payloads = sse_payloads(raw)
    text = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads if "error" not in p and p["choices"])
    errors = [p["error"]["message"] for p in payloads if "error" in p]
    assert not errors or "error" in payloads[-1]
    return text, errors


def ollama_frames(raw: bytes) -> tuple[str, list[str]]:
    lines = ndjson_lines(raw)
    text = "".join(line["message"]["content"] for line in lines if "error" not in line)
    errors = [line["error"] for line in lines if "error" in line]
    assert not errors or "error" in lines[-1]
    return text, errors


DIALECTS = [
    # (client dialect, path, gateway model whose upstream dies, frame reader)
    ("openai client, openai upstream", "/v1/chat/completions", "via-openai", openai_frames),
    ("openai client, ollama upstream", "/v1/chat/completions", "via-ollama", openai_frames),
    ("ollama client, openai upstream", "/api/chat", "via-openai", ollama_frames),
    ("ollama client, ollama upstream", "/api/chat", "via-ollama", ollama_frames),
]


@pytest.mark.parametrize(("name", "path", "model", "read"), DIALECTS, ids=[d[0] for d in DIALECTS])
def test_upstream_killed_midstream(
    gateway: RunningServer, upstream: ServerProcess, upstream_port: int, tmp_path: Path,
    name: str, path: str, model: str, read: Any,
) -> None:
    body = {"model": model, "messages": user("script:slow"), "stream": True}
    with httpx.stream("POST", gateway.url + path, json=body, timeout=10) as response:
        assert response.status_code == 200
        received = b""
        chunks = response.iter_raw()
        while b"tick1 " not in received:  # two tokens through, the upstream is mid-reply
            received += next(chunks)
        upstream.kill()
        received += b"".join(chunks)  # ends: the gateway closes the stream itself

    text, errors = read(received)
    assert text.startswith("tick0 tick1 ") and len(text) < len("tick0 ") * 200
    assert len(errors) == 1, errors
    assert model in errors[0], errors[0]  # the message says which model failed

    # The gateway is fine: alive, serving local models, and a clean 502 for the dead one.
    assert httpx.get(gateway.url + "/health/live").status_code == 200
    local = httpx.post(gateway.url + path, json={"model": "local", "messages": user("hi"), "stream": False})
    assert local.status_code == 200, local.text
    dead = httpx.post(gateway.url + path, json={"model": model, "messages": user("hi"), "stream": False})
    assert dead.status_code == 502, dead.text
    assert json.loads(dead.text)["error"]

    # ... and once the upstream is back, so is the model.
    with dragoman_process(UPSTREAM_CONFIG, upstream_port, tmp_path):
        again = httpx.post(gateway.url + path, json={"model": model, "messages": user("hi"), "stream": False}, timeout=10)
    assert again.status_code == 200, again.text
    assert "Hello, world" in again.text
