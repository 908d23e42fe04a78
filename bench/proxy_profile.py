"""Where a proxied request's CPU time goes: the app called in-process as the ASGI
server would call it, ``--concurrency`` requests at a time, against the canned upstream
(``canned_upstream.py``, its own process), with CPU time per request and optionally a
cProfile of the whole run.

    .venv/bin/python bench/proxy_profile.py [--target dragoman|bare] [--stream] \\
        [--requests 20000] [--profile out.prof] [--root OTHER_CHECKOUT]

The HTTP server itself (uvicorn's parsing and writing) is left out, so what is measured
is the app: routing, middleware, decoding, translation, the upstream client, the reply,
the access log and metrics. ``--target bare`` measures ``bare_passthrough.py``'s app
the same way. The access log goes to a temporary file, as with ``log_format: json``
behind a pipe. The figures are for comparing variants side by side, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from proxy_overhead import MESSAGES, free_port  # noqa: E402
from proxy_workers import wait_port  # noqa: E402


def build_app(target: str, upstream: str, root: Path) -> Any:
    if target == "bare":
        os.environ["BARE_UPSTREAM"] = upstream
        import bare_passthrough

        return bare_passthrough.create()
    sys.path.insert(0, str(root))
    from dragoman.backends.registry import settings_type
    from dragoman.config import load_config
    from dragoman.proxy.app import create_app
    from dragoman.proxy.logging import configure_logging

    work = Path(tempfile.mkdtemp(prefix="dragoman-profile-"))
    path = work / "dragoman.yaml"
    path.write_text(f"server:\n  log_format: json\nmodels:\n  - {{name: bench, backend: openai, base_url: '{upstream}/v1'}}\n")
    config = load_config(path, settings_type)
    sys.stderr = (work / "access.log").open("w")  # the access log's destination, as behind a pipe
    configure_logging(config.server.log_format, config.server.log_level)
    app = create_app(config)
    try:
        from dragoman.proxy.gc_settings import tune_for_serving  # as `dragoman serve` does (absent from older checkouts)
    except ImportError:
        return app
    tune_for_serving()
    return app


def scope_for(body: bytes, port: int) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "server": ("127.0.0.1", port), "client": ("127.0.0.1", 40000), "scheme": "http", "method": "POST",
        "root_path": "", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
        "headers": [
            (b"host", f"127.0.0.1:{port}".encode()), (b"content-type", b"application/json"),
            (b"authorization", b"Bearer bench"), (b"content-length", str(len(body)).encode()),
        ],
        "state": {},
    }  # fmt: skip


async def one(app: Any, body: bytes, port: int) -> int:
    sent = False
    status = 0
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    await app(scope_for(body, port), receive, send)
    done.set()
    return status


async def drive(app: Any, body: bytes, requests: int, concurrency: int, profile: cProfile.Profile | None) -> dict[str, float]:
    port = 8000
    async with app.lifespan():
        for _ in range(200):  # warm-up: connections opened, caches filled
            await one(app, body, port)
        left = requests
        failures = 0

        async def runner() -> None:
            nonlocal left, failures
            while left > 0:
                left -= 1
                if await one(app, body, port) != 200:
                    failures += 1

        if profile is not None:
            profile.enable()
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(runner() for _ in range(concurrency)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if profile is not None:
            profile.disable()
    return {"cpu_us_per_request": cpu / requests * 1e6, "wall_s": wall, "failures": failures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("dragoman", "bare"), default="dragoman")
    parser.add_argument("--root", type=Path, default=ROOT, help="the dragoman checkout to import (default: this one)")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("-c", "--concurrency", type=int, default=32)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the measured requests here")
    parser.add_argument("--top", type=int, default=0, help="print this many functions by cumulative time")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    port = free_port()
    upstream = subprocess.Popen([sys.executable, str(BENCH / "canned_upstream.py"), "--port", str(port),
                                 "--chunks", str(args.chunks)], stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(port, upstream)
        app = build_app(args.target, f"http://127.0.0.1:{port}", args.root.resolve())
        body = json.dumps({"model": "bench", "messages": MESSAGES, "stream": args.stream}).encode()
        profile = cProfile.Profile() if args.profile or args.top else None
        result = asyncio.run(drive(app, body, args.requests, args.concurrency, profile))
    finally:
        upstream.terminate()
        upstream.wait(10)
    print(json.dumps({"target": args.target, "stream": args.stream, **result}), file=sys.__stdout__)
    if profile is not None:
        if args.profile:
            profile.dump_stats(args.profile)
        if args.top:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.top)
            print(out.getvalue(), file=sys.__stdout__)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
