"""A real dragoman server on 127.0.0.1 for tests: uvicorn on a free port, in a thread."""

from __future__ import annotations

import socket
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import uvicorn

from dragoman.backends.registry import settings_type
from dragoman.config import Config, parse_config
from dragoman.proxy.app import create_app
from dragoman.proxy.models import BackendFactory, build_backend


@dataclass(frozen=True)
class RunningServer:
    host: str
    port: int
    config: Config

    @property
    def url(self) -> str:
        """Where a client on this machine reaches it (loopback for a wildcard bind)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(self.host, self.host)
        return f"http://{host}:{self.port}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def config_from_yaml(text: str) -> Config:
    return parse_config(textwrap.dedent(text), "<test>", settings_type)


@contextmanager
def serve(config: Config, *, backend_factory: BackendFactory = build_backend) -> Iterator[RunningServer]:
    """``backend_factory`` lets a test keep hold of the backends it builds. A config that
    names no response store file gets one in a temporary folder, never in ~/.cache; one
    that pulls from Ollama's public registry pulls from none (a test sets a stand-in's)."""
    with tempfile.TemporaryDirectory(prefix="dragoman-test-") as scratch:
        if config.server.responses.path is None:
            responses = msgspec.structs.replace(config.server.responses, path=str(Path(scratch) / "responses.sqlite3"))
            config = msgspec.structs.replace(config, server=msgspec.structs.replace(config.server, responses=responses))
        if config.server.registry == "https://registry.ollama.ai":  # tests reach no internet
            config = msgspec.structs.replace(config, server=msgspec.structs.replace(config.server, registry=""))
        with _serve(config, backend_factory) as server:
            yield server


@contextmanager
def _serve(config: Config, backend_factory: BackendFactory) -> Iterator[RunningServer]:
    """Bound to ``server.host`` (127.0.0.1 unless a test asks for another)."""
    host = config.server.host
    port = free_port(host)
    app = create_app(config, backend_factory=backend_factory)
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="on")
    )
    thread = threading.Thread(target=server.run, name=f"dragoman-test-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer(host, port, config)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
