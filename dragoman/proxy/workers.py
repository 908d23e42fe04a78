"""``server.workers``: several server processes on one port, so the proxy uses every core.

One Python process translates on one core. The supervisor (the ``dragoman serve``
process) binds the port and starts N processes that each run the whole app. On Linux
every worker gets a socket of its own on the port (``SO_REUSEPORT``) and the kernel
spreads new connections over them by a hash of the client's address. One socket shared
by all workers would not spread them: uvloop accepts every pending connection in one
go, so the worker that wakes first takes a whole burst of keep-alive connections and the
others idle (measured: 2 workers served 1.00x one worker). Where ``SO_REUSEPORT`` does
not balance (Windows, macOS), the workers share one socket. The supervisor keeps the
sockets open while it runs, so connections queued on a dead worker's socket wait for its
restart; on stop it closes them first, so new connections are refused, not left waiting.

SIGTERM or Ctrl-C reaches the supervisor, which passes SIGTERM on: each worker refuses
new chats and gives its running streams ``shutdown_grace``, then the supervisor exits
0. A worker that dies is started again (a crash loop stops the server instead).

Local models (``onnx``, ``ctransformers``) belong to a process: with N workers, a
model would load in every worker that gets a request for it (N copies in memory, and
N times ``max_concurrent`` generations at once). So ``auto`` starts one process per
core only when every model entry is an upstream server, and one process otherwise;
asking for more with a local model is allowed but said at start-up, with the cost.
Counters (``/metrics``) are per process too: a scrape sees the worker that answered it.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from dragoman.config import Config
from dragoman.proxy.cpus import cpu_cores

RESTART_WINDOW = 30.0  # seconds: this many restarts inside it is a crash loop
MAX_RESTARTS = 5
ORPHAN_CHECK = 0.5  # seconds between a worker's checks that its supervisor still runs


def local_model_entries(config: Config) -> list[str]:
    """Entries whose backend holds models in the server's processes (unknown backends
    count as local: better one process too few than a model loaded N times)."""
    from dragoman.backends.base import loads_models
    from dragoman.backends.registry import BackendUnavailable, backend_class

    names = []
    for route in config.models:
        try:
            local = loads_models(backend_class(route.config.backend))
        except (KeyError, BackendUnavailable):
            local = True
        if local:
            names.append(route.config.name)
    return names


def process_count(config: Config, cpus: int | None = None) -> int:
    """``server.workers`` resolved: ``auto`` is one per core for upstream-only configs."""
    workers = config.server.workers
    if workers != "auto":
        return workers
    if local_model_entries(config):
        return 1
    return max(1, cpus if cpus is not None else cpu_cores())


def startup_note(config: Config, count: int) -> str | None:
    """What a user should know about N processes with local models."""
    local = local_model_entries(config)
    if count <= 1 or not local:
        return None
    return (
        f"server.workers is {count} and {', '.join(local)} run{'s' if len(local) == 1 else ''} locally: each worker "
        f"process loads such a model on its first request for it (up to {count} copies in memory, and "
        f"max_concurrent applies per process); set server.workers: 1 to load each model once"
    )


def serve_processes(config: Config, config_path: Path | None, sockets: list[socket.socket]) -> int:
    """Run a worker process on each of ``sockets`` (:func:`bind_sockets`) until SIGTERM/SIGINT."""
    count = len(sockets)
    context = multiprocessing.get_context("spawn")
    stop = threading.Event()

    def start(index: int) -> Any:
        args = (sockets[index], str(config_path) if config_path else None, index, os.getpid())
        process = context.Process(target=_worker_main, args=args, name=f"dragoman-worker-{index}")
        process.start()
        return process

    def request_stop(sig: int, frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    processes = [start(i) for i in range(count)]
    restarts: list[float] = []
    code = 0
    try:
        while not stop.wait(0.5):
            for index, process in enumerate(processes):
                if process.is_alive():
                    continue
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < RESTART_WINDOW] + [now]
                if len(restarts) > MAX_RESTARTS:
                    print(f"dragoman: worker processes keep exiting (last status {process.exitcode}); stopping",
                          file=sys.stderr)  # fmt: skip
                    stop.set()
                    code = 1
                    break
                print(f"dragoman: worker {index} exited with status {process.exitcode}; starting it again", file=sys.stderr)
                processes[index] = start(index)
    finally:
        # The supervisor's copies first: a worker closes its own listening socket when
        # told to stop, and while this process still held one the kernel went on
        # accepting connections nobody would serve (they hung for the whole grace
        # period, then were reset); now a new connection is refused at once, as with
        # one process.
        for sock in set(sockets):
            sock.close()
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: the worker's graceful shutdown
        deadline = time.monotonic() + config.server.shutdown_grace + 10
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def balances_by_port() -> bool:
    """Whether the kernel spreads connections over sockets sharing a port: Linux's
    ``SO_REUSEPORT`` does; BSD's and macOS's hand them all to one socket."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """The listening socket of each of ``count`` workers: their own on one port where
    the kernel balances them, else one socket shared by all."""
    if count <= 1 or not balances_by_port():
        return [_bind(host, port)] * count
    # SO_REUSEPORT lets any process of this user bind the port too, so a second
    # ``dragoman serve`` on it would silently share it. A plain bind first keeps the
    # "port in use" error: it fails when anything at all holds the port.
    _bind(host, port, listen=False).close()
    first = _bind(host, port, reuse_port=True)
    port = first.getsockname()[1]  # the port the kernel chose, if asked for port 0
    return [first, *(_bind(host, port, reuse_port=True) for _ in range(count - 1))]


def _bind(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"dragoman: cannot listen on {url_host(host)}:{port}: {exc.strerror or exc}") from exc
    if listen:
        sock.listen(2048)
        sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets (``http://[::]:11434``)."""
    return f"[{host}]" if ":" in host else host


def _worker_main(sock: socket.socket, config_path: str | None, index: int, supervisor: int) -> None:
    """One worker: the whole app on its socket. Ctrl-C in a terminal reaches
    every process of the group; only the supervisor acts on it (it sends SIGTERM), so a
    worker does not take the second signal as "stop now"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _stop_with(supervisor)
    from dragoman.backends.registry import settings_type
    from dragoman.config import load_config
    from dragoman.proxy.app import create_app
    from dragoman.proxy.graceful_server import GracefulServer
    from dragoman.proxy.gc_settings import tune_for_serving
    from dragoman.proxy.host_check import bound_to
    from dragoman.proxy.logging import configure_logging

    # Bound where the supervisor bound the socket (``--host`` may differ from the file):
    # the Host check depends on it.
    config = bound_to(load_config(Path(config_path) if config_path else None, settings_type), sock.getsockname()[0])
    configure_logging(config.server.log_format, config.server.log_level)
    app = create_app(config)
    tune_for_serving()
    server = GracefulServer(
        uvicorn.Config(
            app, log_config=None, access_log=False,
            timeout_graceful_shutdown=math.ceil(config.server.shutdown_grace + 5),
        ),  # fmt: skip
        signals=(signal.SIGTERM,),
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])


def _stop_with(supervisor: int) -> None:
    """SIGTERM (the graceful stop) to this worker once its supervisor is gone: killed
    (``kill -9``, the OOM killer), it stops no one, and orphaned workers went on serving
    the port, so every later ``dragoman serve`` on it failed with "address in use". An
    orphan is adopted by another process, which is how it is noticed (POSIX; on
    Windows ``getppid`` keeps naming the dead parent, so nothing is noticed there)."""
    if sys.platform == "win32":
        return

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(ORPHAN_CHECK)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="supervisor-watch").start()
