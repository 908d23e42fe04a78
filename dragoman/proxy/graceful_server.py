"""uvicorn's server with a graceful stop: the one server object both the single-process
``serve`` and each worker process run."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn


class GracefulServer(uvicorn.Server):
    """uvicorn's server, telling the app when SIGTERM/SIGINT arrives so running streams
    get their grace period and new chats are refused."""

    def __init__(self, config: uvicorn.Config, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        super().__init__(config)
        self.signals = signals

    def handle_exit(self, sig: int, frame: Any) -> None:
        from litestar import Litestar

        app = self.config.app
        table = app.state.get("models") if isinstance(app, Litestar) else None
        if table is not None:
            table.lifetime.begin_shutdown()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal after shutting down, so the process dies by
        # SIGTERM; a graceful stop should exit 0, as service managers expect.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in self.signals}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
