"""dragoman as a child process (``python -m dragoman.proxy.cli serve``), for tests that must kill
a server outright, which a server in a thread of the test process cannot be."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: no grace period, no closing of connections by the server itself."""
        self.process.kill()
        self.process.wait(timeout=10)


@contextmanager
def dragoman_process(config: str, port: int, workdir: Path) -> Iterator[ServerProcess]:
    """A dragoman serving ``config`` (YAML text) on ``port``, up when this yields."""
    config_file = workdir / f"dragoman-{port}.yaml"
    config_file.write_text(config)
    log = workdir / f"dragoman-{port}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config_file), "--port", str(port)],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
    server = ServerProcess(process, port, log)
    try:
        _wait_until_live(server)
        yield server
    finally:
        if process.poll() is None:
            server.kill()


def _wait_until_live(server: ServerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"dragoman exited with {server.process.returncode}:\n{server.log.read_text()[-2000:]}")
        try:
            if httpx.get(server.url + "/health/live", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"dragoman did not come up within {timeout:g}s:\n{server.log.read_text()[-2000:]}")
