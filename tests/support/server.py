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

from backends.registry import settings_type
from config import Config, parse_config
from proxy.app import create_app
from proxy.models import BackendFactory, build_backend


@dataclass(frozen=True)
class RunningServer:
    host: str
    port: int
    config: Config

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_from_yaml(text: str) -> Config:
    return parse_config(textwrap.dedent(text), "<test>", settings_type)


@contextmanager
def serve(config: Config, *, backend_factory: BackendFactory = build_backend) -> Iterator[RunningServer]:
    """``backend_factory`` lets a test keep hold of the backends it builds. A config that
    names no response store file gets one in a temporary folder, never in ~/.cache."""
    with tempfile.TemporaryDirectory(prefix="dragoman-test-") as scratch:
        if config.server.responses.path is None:
            responses = msgspec.structs.replace(config.server.responses, path=str(Path(scratch) / "responses.sqlite3"))
            config = msgspec.structs.replace(config, server=msgspec.structs.replace(config.server, responses=responses))
        with _serve(config, backend_factory) as server:
            yield server


@contextmanager
def _serve(config: Config, backend_factory: BackendFactory) -> Iterator[RunningServer]:
    port = free_port()
    app = create_app(config, backend_factory=backend_factory)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on")
    )
    thread = threading.Thread(target=server.run, name=f"dragoman-test-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield RunningServer("127.0.0.1", port, config)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
