"""``server.workers``: several server processes on one port."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from dragoman.proxy.workers import balances_by_port, bind_sockets, local_model_entries, process_count, startup_note, url_host
from tests.support.replay import Reply, replay_server
from tests.support.server import config_from_yaml, free_port

UPSTREAM = "models:\n  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n"
LOCAL = "models:\n  - {name: local, backend: onnx, path: /nowhere}\n"
GRACE = 20  # seconds: an idle pool stops without waiting for them
SLOW_GAP = 0.5  # seconds between the events of the "slow" upstream stream


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
    from dragoman.config import ConfigError

    with pytest.raises(ConfigError, match="workers"):
        config_from_yaml("server: {workers: 0}\nmodels: []\n")


@pytest.mark.skipif(not balances_by_port(), reason="SO_REUSEPORT balances connections on Linux only")
def test_each_worker_gets_its_own_socket_on_one_port() -> None:
    sockets = bind_sockets("127.0.0.1", 0, 3)
    try:
        assert len({id(sock) for sock in sockets}) == 3
        assert len({sock.getsockname() for sock in sockets}) == 1  # port 0: the kernel's choice, once
        assert all(sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for sock in sockets)
        # SO_REUSEPORT would let a second server of this user share the port unnoticed:
        # it must still be told the port is taken, with one worker or many.
        port = sockets[0].getsockname()[1]
        for count in (1, 2):
            with pytest.raises(SystemExit, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
                bind_sockets("127.0.0.1", port, count)
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize(
    ("host", "shown"), [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "0.0.0.0"), ("::", "[::]"), ("::1", "[::1]"), ("localhost", "localhost")]
)
def test_the_address_is_shown_as_a_url_writes_it(host: str, shown: str) -> None:
    # "http://:::11434" (what start-up printed for --host ::) is no URL a browser or client takes
    assert url_host(host) == shown


def test_one_socket_shared_where_the_kernel_does_not_balance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dragoman.proxy.workers.balances_by_port", lambda: False)
    sockets = bind_sockets("127.0.0.1", 0, 2)
    try:
        assert sockets[0] is sockets[1]
        assert not sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
    finally:
        sockets[0].close()


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
    script = {
        "remote": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
        "slow": Reply("openai/vllm_text.sse", delay_between=SLOW_GAP),  # 13 events: about 6 s
    }
    with replay_server(script) as upstream:  # type: ignore[arg-type]
        config = tmp_path / "workers.yaml"
        config.write_text(f"server: {{workers: 2, shutdown_grace: {GRACE}}}\nmodels:\n"
                          + "".join(f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}/v1'}}\n" for name in script))
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", str(port)],
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
    # Connections made while it is dead wait in its socket's queue (the supervisor holds
    # the socket) and are answered by its successor: none is lost.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        meanwhile = list(pool.map(lambda _: httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": "remote", "messages": [{"role": "user", "content": "hi"}]}).status_code, range(16)))  # fmt: skip
    assert meanwhile == [200] * 16
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


def established(pids: set[int], port: int) -> dict[int, int]:
    """How many accepted connections on ``port`` each process holds (its socket fds
    matched against /proc/net/tcp's established entries)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(fields[9])
    held = {}
    for pid in pids:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir() if fd.name.isdigit()]
        held[pid] = sum(link.startswith("socket:[") and link[8:-1] in inodes for link in links)
    return held


@pytest.mark.skipif(not balances_by_port(), reason="SO_REUSEPORT balances connections on Linux only")
def test_a_burst_of_connections_is_spread_over_the_workers(two_workers: tuple[subprocess.Popen[str], str]) -> None:
    """A load generator (or a client pool) opens its keep-alive connections at once.
    On one shared socket the worker that woke first accepted the whole burst and the
    other idled; with a socket each the kernel spreads them (16 all on one of two
    sockets by chance: 1 in 32,768)."""
    server, url = two_workers
    port = int(url.rsplit(":", 1)[1])
    burst = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
    try:
        for sock in burst:
            sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for sock in burst:
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        held = established(children(server.pid), port)
        assert sum(held.values()) == 16, held
        assert min(held.values()) >= 1, f"one worker took every connection: {held}"
    finally:
        for sock in burst:
            sock.close()


def test_sigterm_lets_both_workers_streams_finish_and_refuses_new_connections(
    two_workers: tuple[subprocess.Popen[str], str],
) -> None:
    """As one process does: the running streams of every worker get the grace period
    and end complete; a new connection meanwhile is refused at once. (The supervisor
    held the listening sockets open: new connections were accepted by the kernel,
    served by nobody, and reset when the grace period was over.)"""
    server, url = two_workers
    port = int(url.rsplit(":", 1)[1])
    started, ended = threading.Barrier(13), {}

    def stream(i: int) -> None:
        body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.Client(timeout=60) as client, client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
            lines = reply.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            started.wait(30)
            rest = [line for line in lines if line.startswith("data:")]
        chunks = [json.loads(line[5:]) for line in [first, *rest] if line != "data: [DONE]"]
        ended[i] = ("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")),
                    rest[-1], time.monotonic())  # fmt: skip

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    started.wait(30)
    held = established(children(server.pid), port)
    assert sum(held.values()) == 12 and min(held.values()) >= 1, f"the streams are not in both workers: {held}"
    server.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while True:  # until the workers have closed their sockets: each try is answered at once
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=SLOW_GAP * 20) as sock:
                sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                answered = sock.recv(1024)  # a 200 or a 503 while a worker is still stopping
        except (ConnectionRefusedError, ConnectionResetError):  # reset: queued as its worker closed
            answered = b""
        if not answered:
            refused_at = time.monotonic()
            break
        assert time.monotonic() < deadline, "new connections were still accepted 10 s after SIGTERM"
        time.sleep(0.05)
    for thread in threads:
        thread.join(GRACE + 30)
    texts = {text for text, _, _ in ended.values()}
    assert len(ended) == 12 and len(texts) == 1 and texts.pop(), ended  # every stream complete, none cut
    assert all(last == "data: [DONE]" for _, last, _ in ended.values())
    assert refused_at < min(at for _, _, at in ended.values()), "a new connection waited for the running streams"
    assert server.wait(GRACE + 30) == 0
    output = server.stdout.read()  # type: ignore[union-attr]
    assert "Traceback" not in output and "shutting down; the reply was cut short" not in output


def running(pid: int) -> bool:
    """Whether ``pid`` is still a live worker (an exited one may linger as a zombie
    where nothing reaps orphans: its command line is empty)."""
    try:
        return "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return False


def test_workers_stop_when_the_supervisor_is_killed(two_workers: tuple[subprocess.Popen[str], str]) -> None:
    """``kill -9`` of the ``dragoman serve`` process (the OOM killer, an impatient
    operator) must not leave its workers serving the port, orphaned: every later
    ``dragoman serve`` on it would fail with "address in use" until someone finds them."""
    server, url = two_workers
    port = int(url.rsplit(":", 1)[1])
    workers = children(server.pid)
    assert len(workers) == 2
    server.kill()
    server.wait()
    try:
        deadline = time.monotonic() + 15
        while any(map(running, workers)):
            assert time.monotonic() < deadline, "the workers went on serving after their supervisor was killed"
            time.sleep(0.2)
        for sock in set(bind_sockets("127.0.0.1", port, 2)):  # the port is free again
            sock.close()
    finally:
        for pid in filter(running, workers):  # (left by a failure: never past the test)
            os.kill(pid, signal.SIGKILL)
