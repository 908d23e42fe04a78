"""Proxy throughput per process and with ``server.workers: 2`` (issue #14), against the
bare pass-through (``bare_passthrough.py``), side by side in one run.

    .venv/bin/python bench/proxy_workers.py [--before DIR [--before-workers 2]] [--rounds 3] [--duration 5]

A canned upstream (``canned_upstream.py``), then for each target a closed-loop load of
``-c`` keep-alive connections (``loadgen.py``, its own process) sending one non-streaming
OpenAI chat: the bare pass-through with 1 and 2 worker processes, dragoman (``openai``
backend, its JSON access log to a file) with 1 and 2, and optionally dragoman from
another checkout (``--before``). Targets alternate within every round. Besides req/s,
the CPU seconds per request of each target's whole process tree, of the load
generator and of the upstream. Everything shares the same cores, the load generator
and the upstream included, so "2 workers" can never reach 2×: the machine's ceiling
for a target is the cores left by other processes (the machine's busy time, less
these three) ÷ the CPU all three spend per request, printed beside it. The load
generator's CPU includes its start-up. Writes ``bench/results/proxy_workers.json``, which ``onnx_speed.py --write``
folds into its table (rows "proxy req/s").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from onnx_decode import rotated  # noqa: E402
from proxy_overhead import MESSAGES, free_port, load, start, wait_ready  # noqa: E402


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


def machine_busy() -> float:
    """CPU seconds all processes of the machine have spent (not idle, not waiting on I/O)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def children_cpu() -> float:
    """CPU seconds of this process's finished children (the load generator, once run)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_targets(args: argparse.Namespace, work: Path, upstream: int) -> dict[str, tuple[int, subprocess.Popen[bytes]]]:
    python = sys.executable
    targets: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    base = f"http://127.0.0.1:{upstream}"
    for workers in (1, 2):
        port = free_port()
        name = "bare" if workers == 1 else "bare, 2 workers"
        targets[name] = (port, start([python, str(BENCH / "bare_passthrough.py"), "--port", str(port), "--upstream",
                                      base, "--workers", str(workers)], work / f"bare{workers}.log"))  # fmt: skip
    config = work / "dragoman.yaml"
    config.write_text(f"server:\n  log_format: json\nmodels:\n  - {{name: bench, backend: openai, base_url: '{base}/v1'}}\n")
    checkouts = [("dragoman", ROOT, 1), ("dragoman, 2 workers", ROOT, 2)]
    if args.before:
        checkouts.append((args.before_name, args.before, args.before_workers))
    for name, root, workers in checkouts:
        port = free_port()
        command = [python, "-m", "proxy.cli", "serve", "--config", str(config), "--port", str(port)]
        if root == ROOT or workers > 1:  # a checkout from before server.workers takes no --workers
            command += ["--workers", str(workers)]
        env = {"PYTHONPATH": str(root)}
        log = work / f"{name.replace(' ', '_').replace(',', '')}.log"
        process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=root,
                                   env={**os.environ, **env})  # fmt: skip
        targets[name] = (port, process)
    for name, (port, process) in targets.items():
        probe = "/api/version" if name.startswith("dragoman") or name == args.before_name else "/v1/chat/completions"
        if probe == "/api/version":
            wait_ready(f"http://127.0.0.1:{port}{probe}", process, 60, work / "x.log")
        else:
            wait_port(port, process)
    return targets


def wait_port(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"a target on port {port} exited ({process.returncode})")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on port {port} after 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("-c", "--concurrency", type=int, default=32)
    parser.add_argument("--before", type=Path, help="another checkout of dragoman to measure (one process)")
    parser.add_argument("--before-name", default="dragoman before")
    parser.add_argument("--before-workers", type=int, default=1, help="worker processes of the --before checkout")
    args = parser.parse_args()
    out: dict[str, object] = {"concurrency": args.concurrency, "duration": args.duration,
                              "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
                              "load_at_start": "/".join(f"{x:.1f}" for x in os.getloadavg())}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dragoman-workers-") as tmp:
        work = Path(tmp)
        upstream_port = free_port()
        procs = [start([sys.executable, str(BENCH / "canned_upstream.py"), "--port", str(upstream_port)],
                       work / "upstream.log")]  # fmt: skip
        try:
            wait_port(upstream_port, procs[0])
            targets = start_targets(args, work, upstream_port)
            procs += [process for _, process in targets.values()]
            body = {"model": "bench", "messages": MESSAGES, "stream": False}
            series: dict[str, list[float]] = {name: [] for name in targets}
            cpu: dict[str, list[float]] = {name: [] for name in targets}
            others: dict[str, list[float]] = {name: [] for name in targets}  # load generator + upstream
            foreign: dict[str, list[float]] = {name: [] for name in targets}  # cores busy with other processes
            for rep in range(args.rounds):
                for name in rotated(list(targets), rep):
                    port, process = targets[name]
                    before, upstream_before, loadgen_before = tree_cpu(process.pid), tree_cpu(procs[0].pid), children_cpu()
                    busy_before, wall = machine_busy(), time.perf_counter()
                    result = load(f"http://127.0.0.1:{port}/v1/chat/completions", body, args.concurrency,
                                  args.duration, args.warmup)  # fmt: skip
                    # CPU is read around warm-up and run, requests are counted in the run
                    # only: the CPU is scaled to the run's share of the time.
                    share = args.duration / (args.duration + args.warmup)
                    server_cpu, upstream_cpu = tree_cpu(process.pid) - before, tree_cpu(procs[0].pid) - upstream_before
                    loadgen_cpu = children_cpu() - loadgen_before
                    busy, wall = machine_busy() - busy_before, time.perf_counter() - wall
                    spent = server_cpu * share
                    around = (loadgen_cpu + upstream_cpu) * share
                    foreign[name].append(max(0.0, busy - server_cpu - upstream_cpu - loadgen_cpu) / wall)
                    series[name].append(result["req_per_s"])
                    cpu[name].append(spent / max(1, result["requests"]) * 1e6)
                    others[name].append(around / max(1, result["requests"]) * 1e6)
                print(f"  round {rep + 1}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in series.items()) + " req/s",
                      flush=True)  # fmt: skip
            out.update(series)
            out["cpu_us_per_request"] = cpu
            out["loadgen_and_upstream_cpu_us_per_request"] = others
            out["other_processes_cores"] = foreign
            out["cores"] = len(os.sched_getaffinity(0))
        finally:
            for process in reversed(procs):
                process.terminate()
            for process in procs:
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
    out["load_at_end"] = "/".join(f"{x:.1f}" for x in os.getloadavg())
    med = statistics.median
    cores = len(os.sched_getaffinity(0))
    for name in series:
        ceiling = (cores - med(foreign[name])) * 1e6 / (med(cpu[name]) + med(others[name]))
        print(f"{name:<24} {med(series[name]):8,.0f} req/s  {med(cpu[name]):6.0f} µs CPU/request; load generator + "
              f"upstream {med(others[name]):3.0f} µs; other processes held {med(foreign[name]):.2f} of {cores} cores: "
              f"ceiling {ceiling:,.0f} req/s")
    out["ratios"] = {"dragoman / bare": med([d / b for d, b in zip(series["dragoman"], series["bare"], strict=True)]),
                     "dragoman 2 workers / 1": med([d / b for d, b in zip(series["dragoman, 2 workers"],
                                                                          series["dragoman"], strict=True)]),
                     "bare 2 workers / 1": med([d / b for d, b in zip(series["bare, 2 workers"], series["bare"],
                                                                      strict=True)])}  # fmt: skip
    if args.before:
        same = "dragoman" if args.before_workers == 1 else "dragoman, 2 workers"
        out["ratios"][f"{same} / {args.before_name}"] = med(  # type: ignore[index]
            [d / b for d, b in zip(series[same], series[args.before_name], strict=True)])
    print("per-round ratios, median: " + ", ".join(f"{k} {v:.2f}×" for k, v in out["ratios"].items()))
    results = BENCH / "results" / "proxy_workers.json"
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {results.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
