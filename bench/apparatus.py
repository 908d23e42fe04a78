"""The cheapest measurement apparatus this machine has, for ``proxy_workers.py``: ``wrk``
(C, one thread) as the load generator and ``nginx`` (one worker process) as the canned
upstream, next to the Python ones (``loadgen.py``, ``canned_upstream.py``).

On two cores, whatever the load generator and the upstream spend per request is taken
from the proxy's second core, so the cheaper they are, the closer "2 workers" can get
to 2x. Both are Debian packages the bench does not need: when one is missing it says
what to install.

nginx answers ``POST /v1/chat/completions`` with exactly the body ``canned_upstream.py``
sends (``return 200 '...'``, keep-alive, no access log), from a config generated in a
temporary folder; wrk sends the same POST as ``loadgen.py`` from a Lua script whose
``done`` hook prints its summary as one JSON line.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

INSTALL = {"nginx": "apt-get install -y nginx-light", "wrk": "apt-get install -y wrk"}
_MARK = "WRK-SUMMARY "


def missing(tool: str) -> str | None:
    """Why ``tool`` cannot be used here, with what to run; ``None`` when it can."""
    if tool == "nginx" and (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        return None
    if tool == "wrk" and shutil.which("wrk"):
        return None
    return f"{tool} is not installed: {INSTALL[tool]} (Debian), or leave the option out for the Python one"


def nginx_binary() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def _nginx_string(text: str) -> str:
    """``text`` as a single-quoted nginx string. ``$`` would be read as a variable and
    nginx has no escape for it, so such a body is refused rather than changed."""
    if "$" in text:
        raise ValueError("nginx cannot return a literal '$' in a string; the canned body must not contain one")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def nginx_config(port: int, body: bytes, work: Path, *, as_root: bool) -> str:
    """One worker process, keep-alive without a request limit, no access log, every
    path nginx writes inside ``work``."""
    temp = "\n".join(f"  {kind}_temp_path {work / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    # A root master hands the worker to "nobody", which cannot enter the private
    # temporary folder; it never needs to, but nginx checks its paths at start.
    user = "user root;\n" if as_root else ""
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {work / 'nginx.pid'};\nerror_log {work / 'nginx-error.log'} warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n  access_log off;\n  keepalive_requests 10000000;\n  keepalive_timeout 300s;\n"
        f"{temp}\n"
        f"  server {{\n    listen 127.0.0.1:{port} backlog=1024;\n"
        "    location = /v1/chat/completions {\n      default_type application/json;\n"
        f"      return 200 {_nginx_string(body.decode())};\n    }}\n  }}\n}}\n"
    )


def start_nginx(port: int, body: bytes, work: Path, log: Path) -> subprocess.Popen[bytes]:
    """nginx in the foreground (its master's process tree is what to read the CPU of)."""
    import os

    config = work / "nginx.conf"
    config.write_text(nginx_config(port, body, work, as_root=os.geteuid() == 0))
    binary = nginx_binary()
    check = subprocess.run([binary, "-t", "-p", str(work), "-e", str(work / "nginx-error.log"), "-c", str(config)],
                           capture_output=True, text=True)  # fmt: skip
    if check.returncode != 0:
        raise RuntimeError(f"nginx refused the generated config {config}: {check.stderr.strip()}")
    return subprocess.Popen([binary, "-p", str(work), "-e", str(work / "nginx-error.log"), "-c", str(config)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)  # fmt: skip


def wrk_script(body: bytes, auth: str) -> str:
    """The POST, and a ``done`` hook that prints wrk's own counts as JSON (rather than
    its human summary, whose units change with the figures)."""
    return (
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body.decode())}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = {json.dumps(auth)}\n'
        "function done(summary, latency, requests)\n"
        "  local e = summary.errors\n"
        f'  io.write(string.format("{_MARK}{{\\"requests\\":%d,\\"duration_us\\":%d,\\"connect\\":%d,'
        '\\"read\\":%d,\\"write\\":%d,\\"status\\":%d,\\"timeout\\":%d,\\"p50_us\\":%d,\\"p99_us\\":%d}\\n",\n'
        "    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,\n"
        "    latency:percentile(50), latency:percentile(99)))\n"
        "end\n"
    )


def parse_wrk(output: str) -> dict[str, object]:
    """wrk's summary (from :func:`wrk_script`'s hook) in ``loadgen.py``'s terms."""
    for line in output.splitlines():
        if line.startswith(_MARK):
            raw = json.loads(line[len(_MARK) :])
            break
    else:
        raise RuntimeError(f"wrk printed no summary (is the Lua script's done hook run?):\n{output[-2000:]}")
    seconds = raw["duration_us"] / 1e6
    errors = sum(raw[k] for k in ("connect", "read", "write", "status", "timeout"))
    first = next((f"{k}: {raw[k]}" for k in ("status", "connect", "read", "write", "timeout") if raw[k]), None)
    return {"requests": raw["requests"], "errors": errors, "first_error": first, "seconds": seconds,
            "req_per_s": raw["requests"] / seconds if seconds else 0.0,
            "p50_ms": raw["p50_us"] / 1000, "p99_ms": raw["p99_us"] / 1000}  # fmt: skip


def run_wrk(url: str, body: bytes, concurrency: int, duration: float, work: Path, auth: str = "Bearer bench",
            warmup: float = 0.0, measured: Callable[[], None] | None = None) -> dict[str, object]:
    """One wrk thread, ``concurrency`` keep-alive connections; a warm-up run first, then
    ``measured()`` (where the caller starts its CPU counters), then the measured run.
    wrk takes whole seconds."""
    script = work / "wrk-post.lua"
    script.write_text(wrk_script(body, auth))

    def once(seconds: float) -> dict[str, object]:
        command = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, math.ceil(seconds))}s", "-s", str(script), url]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"wrk exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
        return parse_wrk(done.stdout)

    if warmup > 0:
        once(warmup)
    if measured is not None:
        measured()
    result = once(duration)
    if result["errors"]:
        print(f"  ! {result['errors']} errors at {url} ({result['first_error']})", file=sys.stderr)
    return result
