"""Whether this machine makes a process slower when a second one is busy on the other
core, with no software shared between them: the same CPU-bound Python loop (JSON in and
out of the canned reply, dicts, strings: what a proxied request is made of) runs alone,
then beside a twin of itself, alternating; its CPU time per iteration is compared.

    .venv/bin/python bench/twin_cores.py [--rounds 5] [--iterations 20000]

``proxy_workers.py`` runs it after its rounds: when a request of dragoman costs more
CPU with two workers busy than with one, this says how much of that the machine itself
adds (shared caches, memory, the host's scheduling of the virtual cores). Prints one
JSON object: alone_us, twin_us (medians, µs per iteration) and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))


def loop(iterations: int) -> float:
    """CPU µs per iteration of a request-shaped piece of pure Python work."""
    from canned_upstream import completion_body

    body = completion_body()
    started = time.process_time()
    for i in range(iterations):
        reply = json.loads(body)
        reply["id"] = f"chatcmpl-{i:016x}"
        fields = {k: v for k, v in reply.items() if k != "usage"}
        line = json.dumps({"event": "request", "status": 200, "path": "/v1/chat/completions", **fields})
        _ = line.encode().split(b",")
    return (time.process_time() - started) / iterations * 1e6


def run(copies: int, iterations: int) -> list[float]:
    command = [sys.executable, __file__, "--child", str(iterations)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    return [float(p.communicate()[0]) for p in processes]


def measure(rounds: int, iterations: int) -> dict[str, float]:
    alone: list[float] = []
    twin: list[float] = []
    for rep in range(rounds):
        for copies in (1, 2) if rep % 2 == 0 else (2, 1):
            got = run(copies, iterations)
            (alone if copies == 1 else twin).extend(got)
    a, t = statistics.median(alone), statistics.median(twin)
    return {"alone_us": a, "twin_us": t, "twin_over_alone": t / a}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(loop(args.child))
        return
    print(json.dumps(measure(args.rounds, args.iterations)))


if __name__ == "__main__":
    main()
