"""What dragoman adds in front of an upstream, next to calling it directly and to
LiteLLM's proxy, measured side by side in one run (a script, not a test).

Every server runs in its own process: a canned-reply upstream (``canned_upstream.py``),
dragoman started as ``dragoman serve`` does, LiteLLM's proxy, and the load generator
(``loadgen.py``). Closed-loop load at concurrency 1 and 64, whole replies and streams of
``--chunks`` chunks. Separately, with the upstream pausing between chunks so that no two
arrive together, dragoman's CPU time per chunk is read from /proc.

    .bench-venv/bin/python bench/proxy_overhead.py --write-docs

Needs: the project's .venv (dragoman), and a separate venv for LiteLLM, matplotlib and
uvloop (see docs/benchmarks.md) so they never touch the server's dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DRAGOMAN = ROOT / ".venv" / "bin" / "dragoman"
LITELLM = Path(sys.executable).with_name("litellm")
MESSAGES = [{"role": "user", "content": "Say hello."}]
LITELLM_KEY = "sk-bench-master"  # LiteLLM's proxy refuses to start without a master key
TARGETS = ["direct", "dragoman", "dragoman (ollama client)", "dragoman (coalesce off)", "litellm"]
STREAM_ONLY = {"dragoman (coalesce off)"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen[bytes], seconds: float, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({process.returncode}); see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url}: not ready after {seconds:.0f}s; see {log}")


def start(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=ROOT)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, body: dict[str, object], concurrency: int, duration: float, warmup: float,
         auth: str = "Bearer bench") -> dict[str, float]:
    command = [sys.executable, str(BENCH / "loadgen.py"), "--url", url, "--body", json.dumps(body),
               "-c", str(concurrency), "-d", str(duration), "--warmup", str(warmup), "--auth", auth]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    if result["errors"]:
        print(f"  ! {result['errors']} errors at {url} (first: {result['first_error']})", file=sys.stderr)
    return result


def target_request(target: str, ports: dict[str, int], stream: bool) -> tuple[str, dict[str, object]]:
    body: dict[str, object] = {"model": "bench", "messages": MESSAGES, "stream": stream}
    if target == "dragoman (ollama client)":
        return f"http://127.0.0.1:{ports['dragoman']}/api/chat", body
    if target == "dragoman (coalesce off)":
        return f"http://127.0.0.1:{ports['dragoman']}/v1/chat/completions", {**body, "model": "bench-as-sent"}
    port = ports["upstream"] if target == "direct" else ports[target]
    return f"http://127.0.0.1:{port}/v1/chat/completions", body


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    ports = {name: free_port() for name in ("upstream", "paced", "dragoman", "litellm")}
    procs: list[subprocess.Popen[bytes]] = []
    python = sys.executable
    try:
        for name, extra in (("upstream", []), ("paced", ["--gap-ms", str(args.gap_ms)])):
            procs.append(start([python, str(BENCH / "canned_upstream.py"), "--port", str(ports[name]),
                                "--chunks", str(args.chunks), *extra], work / f"{name}.log"))
        config = work / "dragoman.yaml"
        config.write_text(
            "server:\n  log_format: json\nmodels:\n"
            f"  - {{name: bench, backend: openai, base_url: 'http://127.0.0.1:{ports['upstream']}/v1', api_key: sk-bench}}\n"
            f"  - {{name: bench-as-sent, backend: openai, base_url: 'http://127.0.0.1:{ports['upstream']}/v1',"
            " api_key: sk-bench, model: bench, coalesce: false}\n"
            f"  - {{name: paced, backend: openai, base_url: 'http://127.0.0.1:{ports['paced']}/v1', api_key: sk-bench,"
            " model: bench, coalesce: false}\n"
        )
        dragoman = start([str(DRAGOMAN), "serve", "--config", str(config), "--port", str(ports["dragoman"])],
                         work / "dragoman.log")
        procs.append(dragoman)
        wait_ready(f"http://127.0.0.1:{ports['dragoman']}/api/version", dragoman, 60, work / "dragoman.log")
        targets = list(TARGETS)
        litellm_note = start_litellm(args, ports, work, procs)
        if litellm_note:
            targets.remove("litellm")
        results = []
        for stream in (False, True):
            for concurrency in args.concurrency:
                for target in targets:
                    if target in STREAM_ONLY and not stream:
                        continue
                    url, body = target_request(target, ports, stream)
                    before = cpu_seconds(dragoman.pid)
                    auth = f"Bearer {LITELLM_KEY}" if target == "litellm" else "Bearer bench"
                    result = load(url, body, concurrency, args.duration, args.warmup, auth)
                    result["dragoman_cpu_s"] = cpu_seconds(dragoman.pid) - before
                    result.update(target=target, stream=stream, concurrency=concurrency)
                    results.append(result)
                    print(f"  {target:<26} {'stream' if stream else 'whole ':<6} c={concurrency:<3} "
                          f"{result['req_per_s']:8.0f} req/s  p50 {result['p50_ms'] or 0:7.2f} ms", flush=True)
        paced = measure_paced(args, ports, dragoman.pid)
        paced["floor_cpu_us_per_chunk"] = measure_floor(args, ports)
        return {"results": results, "paced": paced, "litellm_note": litellm_note, "chunks": args.chunks,
                "duration": args.duration, "machine": machine(), "litellm_version": litellm_version()}
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_litellm(args: argparse.Namespace, ports: dict[str, int], work: Path,
                  procs: list[subprocess.Popen[bytes]]) -> str | None:
    """Starts LiteLLM's proxy; returns why not, when it cannot be."""
    if args.no_litellm:
        return "skipped (--no-litellm)"
    if not LITELLM.exists():
        return f"not installed in {Path(sys.executable).parent.parent} (pip install 'litellm[proxy]')"
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench\n"
        f"      api_base: http://127.0.0.1:{ports['upstream']}/v1\n      api_key: sk-bench\n"
    )
    # No network here: the model price map ships with the package.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR",
           "LITELLM_MASTER_KEY": LITELLM_KEY}
    proc = start([str(LITELLM), "--config", str(config), "--port", str(ports["litellm"]), "--num_workers", "1"],
                 work / "litellm.log", env)
    procs.append(proc)
    try:
        wait_ready(f"http://127.0.0.1:{ports['litellm']}/health/liveliness", proc, 180, work / "litellm.log")
    except RuntimeError as exc:
        return f"could not be started: {exc}: {tail(work / 'litellm.log')}"
    return None


def measure_paced(args: argparse.Namespace, ports: dict[str, int], pid: int) -> dict[str, float]:
    """dragoman's CPU per streamed chunk when every chunk arrives alone (no coalescing
    possible), and per whole request, at concurrency 1."""
    url = f"http://127.0.0.1:{ports['dragoman']}/v1/chat/completions"
    before = cpu_seconds(pid)
    # No warm-up, so every request the CPU time covers is counted (but the one cut off).
    streamed = load(url, {"model": "paced", "messages": MESSAGES, "stream": True}, 1, args.duration, 0)
    stream_cpu = cpu_seconds(pid) - before
    chunks = streamed["requests"] * args.chunks
    return {"requests": streamed["requests"], "cpu_s": stream_cpu, "cpu_us_per_chunk": stream_cpu / chunks * 1e6,
            "p50_ms": streamed["p50_ms"], "gap_ms": args.gap_ms}


def measure_floor(args: argparse.Namespace, ports: dict[str, int]) -> float:
    """CPU per chunk of a bare aiohttp client that only reads the same paced stream: what
    receiving one chunk costs this machine at all, before any proxying."""
    import asyncio

    import aiohttp

    async def read(requests: int) -> float:
        url = f"http://127.0.0.1:{ports['paced']}/v1/chat/completions"
        body = json.dumps({"model": "bench", "messages": MESSAGES, "stream": True})
        async with aiohttp.ClientSession() as session:
            before = os.times()
            for _ in range(requests):
                async with session.post(url, data=body, headers={"content-type": "application/json"}) as response:
                    async for _chunk in response.content.iter_any():
                        pass
            after = os.times()
        spent = after.user - before.user + after.system - before.system
        return spent / (requests * args.chunks) * 1e6

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(read(max(5, int(args.duration / (args.gap_ms / 1000 * args.chunks)))))


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    venv = ROOT / ".venv" / "bin" / "python"
    probe = "import importlib.util as u; print(','.join(m for m in ('uvloop', 'httptools') if u.find_spec(m)) or 'none')"
    fast = subprocess.run([str(venv), "-c", probe], capture_output=True, text=True).stdout.strip()
    return f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}, dragoman's uvicorn extras: {fast}"


def litellm_version() -> str:
    try:
        from importlib.metadata import version

        return version("litellm")
    except Exception:
        return "not installed"


def tail(path: Path, lines: int = 5) -> str:
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) if path.exists() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring, per run")
    parser.add_argument("--chunks", type=int, default=100, help="content chunks of a streamed reply")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--gap-ms", type=float, default=1.0, help="pause between chunks for the CPU-per-chunk run")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md and its plot")
    parser.add_argument("--from-results", action="store_true", help="re-render the last results without measuring")
    args = parser.parse_args()
    from proxy_overhead_report import render_table, update_docs, write_plot  # beside this file

    saved = BENCH / "results" / "proxy_overhead.json"
    if args.from_results:
        data = json.loads(saved.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="dragoman-bench-") as tmp:
            data = run(args, Path(tmp))
        data["command"] = " ".join([os.path.relpath(sys.executable, ROOT), os.path.relpath(__file__, ROOT), *sys.argv[1:]])
        saved.parent.mkdir(exist_ok=True)
        saved.write_text(json.dumps(data, indent=2))
    command = data.get("command", "python bench/proxy_overhead.py")
    table = render_table(data)
    print(table)
    if args.write_docs:
        plot = write_plot(data, ROOT / "docs" / "proxy_overhead.png")
        update_docs(ROOT / "docs" / "benchmarks.md", table, command.strip(), plot.name, data)


if __name__ == "__main__":
    main()
