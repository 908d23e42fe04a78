"""``server.workers``: several server processes on one port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from proxy.workers import local_model_entries, process_count, startup_note
from tests.support.replay import Reply, replay_server
from tests.support.server import config_from_yaml, free_port

UPSTREAM = "models:\n  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n"
LOCAL = "models:\n  - {name: local, backend: onnx, path: /nowhere}\n"
GRACE = 20  # seconds: an idle pool stops without waiting for them


@pytest.mark.parametrize(
    ("yaml", "cpus", "expected"),
    [
        (UPSTREAM, 2, 2),  # upstream only: a process per core
        (UPSTREAM, 16, 16),
        (LOCAL, 16, 1),  # a local model: one process, so it loads once
        (UPSTREAM + "  - {name: local, backend: onnx, path: /nowhere}\n", 4, 1),
        ("server: {workers: 3}\n" + LOCAL, 16, 3),  # asked for: given
        ("server: {workers: 1}\n" + UPSTREAM, 16, 1),
        ("server: {workers: auto}\nmodels: []\n", 8, 8),
    ],
)
def test_process_count(yaml: str, cpus: int, expected: int) -> None:
    assert process_count(config_from_yaml(yaml), cpus) == expected


def test_local_entries_and_the_start_up_note() -> None:
    config = config_from_yaml("server: {workers: 2}\n" + UPSTREAM + "  - {name: local, backend: onnx, path: /nowhere}\n")
    assert local_model_entries(config) == ["local"]
    note = startup_note(config, 2)
    assert note is not None and "local" in note and "2 copies" in note and "server.workers: 1" in note
    assert startup_note(config_from_yaml(UPSTREAM), 4) is None
    assert startup_note(config, 1) is None


def test_workers_must_be_positive() -> None:
    from config import ConfigError

    with pytest.raises(ConfigError, match="workers"):
        config_from_yaml("server: {workers: 0}\nmodels: []\n")


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:  # a process can be reaped between the two reads (the killed worker is)
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "spawn_main" in (entry / "cmdline").read_text():
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads worker processes from /proc (Linux)")
    with replay_server({"remote": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json")}) as upstream:
        config = tmp_path / "workers.yaml"
        config.write_text(f"server: {{workers: 2, shutdown_grace: {GRACE}}}\nmodels:\n  - {{name: remote, backend: openai, base_url: '{upstream.url}/v1'}}\n")
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), "--port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while len(children(server.pid)) < 2 or not _answers(url):
                assert server.poll() is None, server.stdout.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the workers did not start"
                time.sleep(0.2)
            yield server, url
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/version", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_two_workers_serve_one_port_restart_and_stop_cleanly(two_workers: tuple[subprocess.Popen[str], str]) -> None:
    server, url = two_workers
    clients = [openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)]

    def ask() -> str:
        reply = clients[-1].chat.completions.create(model="remote", messages=[{"role": "user", "content": "hi"}])
        return reply.choices[0].message.content or ""

    answers = {ask() for _ in range(12)}
    assert len(answers) == 1 and answers.pop()
    workers = children(server.pid)
    assert len(workers) == 2

    os.kill(next(iter(workers)), signal.SIGKILL)  # a worker dies: it is started again
    deadline = time.monotonic() + 30
    while len(children(server.pid)) < 2 or children(server.pid) == workers:
        assert time.monotonic() < deadline, "the dead worker was not started again"
        time.sleep(0.2)
    # A new client: the old one's kept-alive connection has idled as long as the restart
    # took, and under load that is about uvicorn's 5 s keep-alive timeout, so a request on
    # it can meet the server closing it (a reset that says nothing about the workers).
    clients.append(openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))
    assert all(ask() for _ in range(6))

    running = children(server.pid)
    began = time.monotonic()
    server.send_signal(signal.SIGTERM)
    # Nothing was running: the workers stop without the grace period (the supervisor
    # would wait GRACE + 10 s for them); measured against it, not a fixed time.
    assert server.wait(GRACE + 30) == 0
    assert time.monotonic() - began < GRACE
    assert not any(Path(f"/proc/{pid}").exists() for pid in running)
    output = server.stdout.read()  # type: ignore[union-attr]
    assert "with 2 worker processes" in output
    assert "exited with status -9; starting it again" in output
    assert "Traceback" not in output
