"""`dragoman serve` run as a user runs it, in its own process, on a port it picks
(``--port 0``) and names on its terminal: a test reads that line and what follows."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import msgspec

ADDRESS = re.compile(r"on (http://(?:\[[0-9a-f:]+\]|[\w.]+):\d+)")


class Served(msgspec.Struct):
    url: str  # as the start-up line named it
    lines: list[str]  # the serve process's stderr, as it arrives
    process: subprocess.Popen[str]

    def kill_all(self) -> None:
        """SIGKILL to the serve process and its server processes, as a machine or a
        container dies: nothing gets to shut down."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


@contextmanager
def dragoman_serve(config: Path, *args: str) -> Iterator[Served]:
    """Serves ``config`` (with more ``serve`` options ``args``) until the block ends,
    then stops it with SIGTERM, as a service manager would; it must exit 0."""
    server = subprocess.Popen(
        [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", "0", *args],
        stderr=subprocess.PIPE, text=True, start_new_session=True,  # its own process group: kill_all
    )  # fmt: skip
    assert server.stderr is not None
    stderr = server.stderr
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in stderr), daemon=True)
    reader.start()
    try:
        yield Served(_address(lines, server), lines, server)
        if server.poll() is None:  # unless the test killed it
            server.send_signal(signal.SIGTERM)
            assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _address(lines: list[str], server: subprocess.Popen[str]) -> str:
    """The URL the start-up line names, once it answers there."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in list(lines):
            if found := ADDRESS.search(line):
                url = found.group(1)
                while time.monotonic() < deadline:
                    try:
                        httpx.get(url + "/api/version", timeout=2)
                        return url
                    except httpx.TransportError:
                        assert server.poll() is None, "it does not serve the port it named:\n" + "\n".join(lines)
                        time.sleep(0.2)
        assert server.poll() is None, "\n".join(lines)
        time.sleep(0.1)
    raise AssertionError("dragoman serve did not say where it serves:\n" + "\n".join(lines))
