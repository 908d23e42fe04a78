"""One measured load run of ``proxy_workers.py``, and the CPU it cost each process: the
server's whole process tree (its kernel time and its supervisor's own apart), the load
generator, the upstream, and what other processes of the machine held meanwhile."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import apparatus  # noqa: E402
from proxy_overhead import load  # noqa: E402

def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its children (workers included)."""
    try:
        root = psutil.Process(pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            times = process.cpu_times()
            total += times.user + times.system
        return total
    except psutil.Error:
        return 0.0


def server_parts(pid: int) -> tuple[float, float]:
    """Of a server's CPU seconds: the kernel's (system time, all its processes), and the
    root process's own (the supervisor, when there are workers)."""
    try:
        root = psutil.Process(pid)
        system = sum(p.cpu_times().system for p in [root, *root.children(recursive=True)])
        own = root.cpu_times()
        return system, own.user + own.system
    except psutil.Error:
        return 0.0, 0.0


def machine_busy() -> float:
    """CPU seconds all processes of the machine have spent (not idle, not waiting on I/O)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def children_cpu() -> float:
    """CPU seconds of this process's finished children (the load generator, once run)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Apparatus:
    """What measures: a load generator and an upstream (``python`` or the cheap ones)."""

    loadgen: str  # "python" (loadgen.py) or "wrk"
    upstream: str  # "python" (canned_upstream.py) or "nginx"

    @property
    def label(self) -> str:
        return "python" if self == PYTHON else f"{self.loadgen} + {self.upstream}"

    @property
    def model(self) -> str:
        """The model entry of dragoman's config that forwards to this upstream."""
        return f"bench-{self.upstream}"


PYTHON = Apparatus("python", "python")


def background_load(app: Apparatus, url: str, body: dict[str, object], concurrency: int, seconds: float,
                    work: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    """A load on the twin for ``seconds``, running while a target is measured."""
    if app.loadgen == "wrk":
        script = work / "wrk-twin.lua"
        script.write_text(apparatus.wrk_script(json.dumps(body).encode(), "Bearer bench"))
        command = ["wrk", "-t1", f"-c{concurrency}", f"-d{int(seconds) + 1}s", "-s", str(script), url]
    else:
        command = [sys.executable, str(BENCH / "loadgen.py"), "--url", url, "--body", json.dumps(body),
                   "-c", str(concurrency), "-d", str(seconds), "--warmup", "0"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(app: Apparatus, url: str, body: dict[str, object], args: argparse.Namespace, work: Path,
            server_pid: int, upstream_pid: int, concurrency: int) -> dict[str, float]:  # fmt: skip
    """One load run; the CPU each process spent per request and the cores other processes held."""
    base: dict[str, float] = {}

    def counters() -> dict[str, float]:
        system, supervisor = server_parts(server_pid)
        return {"server": tree_cpu(server_pid), "server_sys": system, "supervisor": supervisor,
                "upstream": tree_cpu(upstream_pid), "loadgen": children_cpu(),
                "busy": machine_busy(), "wall": time.perf_counter()}  # fmt: skip

    def begin() -> None:
        base.update(counters())

    if app.loadgen == "wrk":
        # Counters start after wrk's warm-up run: the measured run is all they cover.
        result = apparatus.run_wrk(url, json.dumps(body).encode(), concurrency, args.duration, work,
                                   warmup=args.warmup, measured=begin)  # fmt: skip
        share = 1.0
    else:
        begin()
        result = load(url, body, concurrency, args.duration, args.warmup)
        # CPU is read around warm-up and run, requests are counted in the run only: the
        # CPU is scaled to the run's share of the time.
        share = args.duration / (args.duration + args.warmup)
    spent = {k: v - base[k] for k, v in counters().items()}
    requests = max(1, int(result["requests"]))
    foreign = max(0.0, spent["busy"] - spent["server"] - spent["upstream"] - spent["loadgen"]) / spent["wall"]
    return {"req_per_s": float(result["req_per_s"]), "errors": float(result["errors"]), "foreign": foreign,
            **{f"{k}_us": spent[k] * share / requests * 1e6 for k in ("server", "server_sys", "supervisor", "loadgen", "upstream")}}  # fmt: skip
