"""Proxy throughput per process and with ``server.workers: 2`` (issue #14), against the
bare pass-through (``bare_passthrough.py``), side by side in one run.

    .venv/bin/python bench/proxy_workers.py [--before DIR [--before-workers 2]] [--rounds 3] [--duration 5] \\
        [--loadgen wrk] [--upstream nginx] [--compare] [--controls]

A canned upstream, then for each target a closed-loop load of ``-c`` keep-alive
connections sending one non-streaming OpenAI chat: the bare pass-through with 1 and 2
worker processes, dragoman (``openai`` backend, its JSON access log to a file) with 1
and 2, and optionally dragoman from another checkout (``--before``). Targets alternate
within every round. Besides req/s, the CPU seconds per request of each target's whole
process tree, of the load generator and of the upstream. Everything shares the same
cores, the load generator and the upstream included, so "2 workers" can never reach 2x:
the machine's ceiling for a target is the cores left by other processes (the machine's
busy time, less these three) / the CPU all three spend per request, printed beside it.

The apparatus: by default the Python load generator (``loadgen.py``, its CPU includes
its start-up) and the Python canned upstream (``canned_upstream.py``). ``--loadgen wrk``
and ``--upstream nginx`` use the cheapest this machine has instead (``apparatus.py``:
Debian's wrk, one thread, and nginx answering with the same JSON); ``--compare``
measures the Python apparatus too, alternating with the chosen one in every round.
Before measuring, dragoman's reply through every upstream is checked (status 200, the
same JSON). ``--controls`` asks where a request's extra CPU with 2 workers comes from:
one worker at half the connections (what each of two gets), the same beside a separate
dragoman process kept busy (sharing no file, socket or supervisor with it), and a
CPU-bound loop alone and beside a twin (``twin_cores.py``: the machine alone). Writes ``bench/results/proxy_workers.json`` (its top-level series are the
chosen apparatus's), which ``onnx_speed.py --write`` folds into its table (rows "proxy
req/s").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import apparatus  # noqa: E402
from canned_upstream import completion_body  # noqa: E402
from onnx_decode import rotated  # noqa: E402
from proxy_load import PYTHON, Apparatus, background_load, measure  # noqa: E402
from proxy_overhead import MESSAGES, free_port, start, wait_ready  # noqa: E402


# --controls: a second, separate dragoman process (sharing no file, no supervisor, no
# socket with the measured one) that is kept busy while one of them is measured.
TWIN = "twin"
CONTROLS = ("dragoman at c/2", "dragoman beside a busy twin")


def start_upstreams(kinds: list[str], work: Path) -> dict[str, tuple[int, subprocess.Popen[bytes]]]:
    upstreams: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    for kind in kinds:
        port = free_port()
        if kind == "nginx":
            process = apparatus.start_nginx(port, completion_body(), work, work / "nginx.log")
        else:
            process = start([sys.executable, str(BENCH / "canned_upstream.py"), "--port", str(port)],
                            work / "upstream.log")  # fmt: skip
        upstreams[kind] = (port, process)
    for port, process in upstreams.values():
        wait_port(port, process)
    return upstreams


def start_targets(args: argparse.Namespace, work: Path, upstreams: dict[str, tuple[int, subprocess.Popen[bytes]]]
                  ) -> dict[tuple[str, str], tuple[int, subprocess.Popen[bytes]]]:  # fmt: skip
    """Every target, keyed by (name, upstream kind): the bare pass-through forwards to one
    upstream, so it runs once per upstream; dragoman reaches each through a model entry."""
    python = sys.executable
    targets: dict[tuple[str, str], tuple[int, subprocess.Popen[bytes]]] = {}
    for kind, (upstream, _) in upstreams.items():
        for workers in (1, 2):
            port = free_port()
            name = "bare" if workers == 1 else "bare, 2 workers"
            targets[name, kind] = (port, start([python, str(BENCH / "bare_passthrough.py"), "--port", str(port),
                                                "--upstream", f"http://127.0.0.1:{upstream}", "--workers", str(workers)],
                                               work / f"bare{workers}-{kind}.log"))  # fmt: skip
    config = work / "dragoman.yaml"
    entries = "".join(f"  - {{name: bench-{kind}, backend: openai, base_url: 'http://127.0.0.1:{port}/v1', model: bench}}\n"
                      for kind, (port, _) in upstreams.items())  # fmt: skip
    config.write_text(f"server:\n  log_format: json\nmodels:\n{entries}")
    checkouts = [("dragoman", ROOT, 1), ("dragoman, 2 workers", ROOT, 2)]
    if args.before:
        checkouts.append((args.before_name, args.before, args.before_workers))
    if args.controls:
        checkouts.append((TWIN, ROOT, 1))
    for name, root, workers in checkouts:
        port = free_port()
        command = [python, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", str(port)]
        if root == ROOT or workers > 1:  # a checkout from before server.workers takes no --workers
            command += ["--workers", str(workers)]
        env = {"PYTHONPATH": str(root)}
        log = work / f"{name.replace(' ', '_').replace(',', '')}.log"
        process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=root,
                                   env={**os.environ, **env})  # fmt: skip
        for kind in upstreams:  # one process serves every upstream's entry
            targets[name, kind] = (port, process)
    for (name, _), (port, process) in targets.items():
        if name.startswith("bare"):
            wait_port(port, process)
        else:
            wait_ready(f"http://127.0.0.1:{port}/api/version", process, 60, work / "x.log")
    return targets


def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json",
                                                                      "authorization": "Bearer bench"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def check_replies(targets: dict[tuple[str, str], tuple[int, subprocess.Popen[bytes]]], kinds: list[str],
                  upstreams: dict[str, tuple[int, subprocess.Popen[bytes]]]) -> None:  # fmt: skip
    """Every upstream answers the canned JSON, and dragoman (one and two workers) passes
    it on the same through each: status 200, the same reply but for its own id and time
    and the model name asked for."""
    canned = json.loads(completion_body())
    for kind in kinds:
        status, direct = post(f"http://127.0.0.1:{upstreams[kind][0]}/v1/chat/completions", {"model": "bench"})
        if status != 200 or {**direct, "created": 0} != {**canned, "created": 0}:
            raise RuntimeError(f"the {kind} upstream answered {status} {direct}, not the canned reply {canned}")
    replies = {}
    for (name, kind), (port, _) in targets.items():
        if name.startswith("bare"):  # passes the upstream's reply on as it came
            status, reply = post(f"http://127.0.0.1:{port}/v1/chat/completions", {"model": "bench", "messages": MESSAGES})
            if status != 200 or {**reply, "created": 0} != {**canned, "created": 0}:
                raise RuntimeError(f"{name} through the {kind} upstream answered {status} {reply}")
            continue
        body = {"model": f"bench-{kind}", "messages": MESSAGES, "stream": False}
        status, reply = post(f"http://127.0.0.1:{port}/v1/chat/completions", body)
        if status != 200 or reply.get("choices", [{}])[0].get("message", {}).get("content") != \
                canned["choices"][0]["message"]["content"]:  # fmt: skip
            raise RuntimeError(f"{name} through the {kind} upstream answered {status} {reply}")
        if reply.get("model") != body["model"]:  # the name the client asked for, as OpenAI does
            raise RuntimeError(f"{name} through the {kind} upstream named the model {reply.get('model')!r}")
        replies[name, kind] = {k: v for k, v in reply.items() if k not in ("id", "created", "model")}
    for name in {n for n, _ in replies}:
        seen = {json.dumps(r, sort_keys=True) for (n, _), r in replies.items() if n == name}
        if len(seen) != 1:
            raise RuntimeError(f"{name} answers differently through the upstreams: {seen}")
    print(f"  replies checked: status 200 and the canned JSON through {', '.join(kinds)}", flush=True)


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
    parser.add_argument("--loadgen", choices=["python", "wrk"], default="python",
                        help="load generator: loadgen.py, or wrk (C, one thread; apt-get install -y wrk)")
    parser.add_argument("--upstream", choices=["python", "nginx"], default="python",
                        help="canned upstream: canned_upstream.py, or nginx (apt-get install -y nginx-light)")
    parser.add_argument("--controls", action="store_true",
                        help="also one worker at c/2, alone and beside a separate busy dragoman (its CPU/request only)")
    parser.add_argument("--compare", action="store_true",
                        help="measure the Python apparatus too, alternating with the chosen one in every round")
    args = parser.parse_args()
    chosen = Apparatus(args.loadgen, args.upstream)
    apparatuses = [chosen] + ([PYTHON] if args.compare and chosen != PYTHON else [])
    for tool in {chosen.loadgen, chosen.upstream} - {"python"}:
        if problem := apparatus.missing(tool):
            print(f"proxy_workers: {problem}", file=sys.stderr)
            return 2
    kinds = list(dict.fromkeys(a.upstream for a in apparatuses))
    out: dict[str, object] = {"concurrency": args.concurrency, "duration": args.duration,
                              "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
                              "load_at_start": "/".join(f"{x:.1f}" for x in os.getloadavg()),
                              "apparatus_label": chosen.label}  # fmt: skip
    keys = ("req_per_s", "server_us", "server_sys_us", "supervisor_us", "loadgen_us", "upstream_us", "foreign", "errors")
    runs: dict[str, dict[str, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="dragoman-workers-") as tmp:
        work = Path(tmp)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            upstreams = start_upstreams(kinds, work)
            procs += [process for _, process in upstreams.values()]
            targets = start_targets(args, work, upstreams)
            procs += list(dict.fromkeys(process for _, process in targets.values()))
            names = [name for name in dict.fromkeys(name for name, _ in targets) if name != TWIN]
            names += list(CONTROLS) if args.controls else []
            check_replies(targets, kinds, upstreams)
            runs = {a.label: {n: {k: [] for k in keys} for n in names} for a in apparatuses}
            for rep in range(args.rounds):
                for app in rotated(apparatuses, rep):
                    for name in rotated(names, rep):
                        body = {"model": app.model, "messages": MESSAGES, "stream": False}
                        # The controls: one worker at half the connections (what each of
                        # two workers gets), alone and beside its busy twin.
                        control = name in CONTROLS
                        port, process = targets["dragoman" if control else name, app.upstream]
                        concurrency = args.concurrency // 2 if control else args.concurrency
                        twin = None
                        if name == CONTROLS[1]:
                            twin_port = targets[TWIN, app.upstream][0]
                            twin = background_load(app, f"http://127.0.0.1:{twin_port}/v1/chat/completions", body,
                                                   concurrency, args.warmup + args.duration + 1, work)  # fmt: skip
                        try:
                            got = measure(app, f"http://127.0.0.1:{port}/v1/chat/completions", body, args, work,
                                          process.pid, upstreams[app.upstream][1].pid, concurrency)  # fmt: skip
                        finally:
                            if twin is not None:
                                twin.terminate()
                                twin.wait()
                        for k in keys:
                            runs[app.label][name][k].append(got[k])
                    print(f"  round {rep + 1}, {app.label}: "
                          + ", ".join(f"{n} {v['req_per_s'][-1]:,.0f}" for n, v in runs[app.label].items()) + " req/s",
                          flush=True)  # fmt: skip
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
    out["cores"] = cores

    def ratio(series: dict[str, dict[str, list[float]]], a: str, b: str) -> float:
        return med([x / y for x, y in zip(series[a]["req_per_s"], series[b]["req_per_s"], strict=True)])

    summary: dict[str, object] = {}
    for label, series in runs.items():
        print(f"apparatus: {label}")
        ceilings: dict[str, float] = {}
        for name, v in series.items():
            kernel = f" (kernel {med(v['server_sys_us']):.0f}"
            kernel += f", supervisor {med(v['supervisor_us']):.1f})" if "2 workers" in name else ")"
            if name == CONTROLS[1]:  # the twin's load and its share of the upstream are not this target's
                print(f"  {name:<28} {med(v['req_per_s']):8,.0f} req/s  CPU µs/request: server {med(v['server_us']):4.0f}"
                      + kernel)  # fmt: skip
                continue
            per_request = med(v["server_us"]) + med(v["loadgen_us"]) + med(v["upstream_us"])
            ceiling = ceilings[name] = (cores - med(v["foreign"])) * 1e6 / per_request
            print(f"  {name:<28} {med(v['req_per_s']):8,.0f} req/s  CPU µs/request: server {med(v['server_us']):4.0f}"
                  f"{kernel}, "
                  f"load generator {med(v['loadgen_us']):3.0f}, upstream {med(v['upstream_us']):3.0f}; other "
                  f"processes held {med(v['foreign']):.2f} of {cores} cores: ceiling {ceiling:,.0f} req/s "
                  f"({med(v['req_per_s']) / ceiling:.0%} of it)")  # fmt: skip
        ratios = {"dragoman / bare": ratio(series, "dragoman", "bare"),
                  "dragoman 2 workers / 1": ratio(series, "dragoman, 2 workers", "dragoman"),
                  "bare 2 workers / 1": ratio(series, "bare, 2 workers", "bare")}  # fmt: skip
        if args.before:
            same = "dragoman" if args.before_workers == 1 else "dragoman, 2 workers"
            ratios[f"{same} / {args.before_name}"] = ratio(series, same, args.before_name)
        # What 2 workers could reach here if the second core only lost what the load
        # generator and the upstream take from it, at one worker's CPU per request.
        one = series["dragoman"]
        server, around = med(one["server_us"]), med(one["loadgen_us"]) + med(one["upstream_us"])
        bound = (cores - med(series["dragoman, 2 workers"]["foreign"])) * server / (server + around)
        print("  per-round ratios, median: " + ", ".join(f"{k} {v:.2f}×" for k, v in ratios.items())
              + f"; bound for 2 workers / 1 at one worker's CPU/request: {bound:.2f}×")  # fmt: skip
        summary[label] = {"series": series, "ratios": ratios, "bound_2_workers": bound, "ceilings": ceilings}
    if args.controls:
        import twin_cores

        twin = out["twin_cores"] = twin_cores.measure(args.rounds, 100_000)
        print(f"a CPU-bound Python loop (twin_cores.py): {twin['alone_us']:.2f} µs an iteration alone, "
              f"{twin['twin_us']:.2f} beside a twin of itself on the other core ({twin['twin_over_alone']:.3f}×)")
    primary = runs[chosen.label]
    # The chosen apparatus's figures at the top level, where onnx_speed_report.py reads them.
    out.update({name: v["req_per_s"] for name, v in primary.items()})
    out["cpu_us_per_request"] = {name: v["server_us"] for name, v in primary.items()}
    out["loadgen_and_upstream_cpu_us_per_request"] = {name: [a + b for a, b in zip(v["loadgen_us"], v["upstream_us"])]
                                                      for name, v in primary.items()}  # fmt: skip
    out["other_processes_cores"] = {name: v["foreign"] for name, v in primary.items()}
    out["ratios"] = summary[chosen.label]["ratios"]  # type: ignore[index]
    out["apparatus"] = summary
    results = BENCH / "results" / "proxy_workers.json"
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {results.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
