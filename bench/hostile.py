"""Hostile requests against the streams beside them (issue #9): while four victim streams
run on the default model, the hostile request of each row arrives; what the victims see
with the attack against without it, measured on one server in alternating windows.

    DRAGOMAN_HOME=.dragoman-test-home .venv/bin/python bench/hostile.py \\
        [--rounds N] [--kinds a,b] [--write]

Each kind gets a fresh server (what one hostile request did to a worker cannot spill
into the next kind) and ``--rounds`` pairs of windows, quiet then hostile, hostile then
quiet, alternating. A hostile window runs from the request's arrival until its answer
plus 2 s (at least 3 s, at most ``--window-cap``); a quiet window lasts ``--quiet`` s.
Per window: the victims' gaps between consecutive tokens (across replies, gaps still
open at the window's end included, so a stream that gets nothing counts), the time from
sending each victim reply to its first token, and the peak resident memory of the
server and of its model worker. The table gives hostile/quiet ratios of the p99 gap,
the median first-token time and the peak memory (target: gaps within 2x), streams cut
by an error, and the hostile request's answer checked against what the row must get
(status and the words naming the limit; ``ok`` or ``UNEXPECTED``).

The kinds are ``bench/hostile_kinds.py``'s table; the upstream and image kinds come from
``bench/hostile_peers.py`` (a process of its own serves the hostile upstream and image
host, so sending hundreds of MiB costs this one nothing). ``--write`` puts the table
into ``docs/benchmarks.md`` (section "Hostile requests (issue #9)") and
``bench/results/hostile.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import hostile_peers  # noqa: E402
from hostile_kinds import KINDS, Kind  # noqa: E402
from onnx_decode import free_port  # noqa: E402

if shutil.which("curl") is None:
    raise SystemExit("bench/hostile.py sends the hostile requests with curl: apt-get install curl")

MODEL = "smol"
STREAMS = 4
STORY = [{"role": "user", "content": "Write a long story about a dragon who guards a library."}]
MiB = 1024 * 1024


@dataclass
class Window:
    hostile: bool
    gaps: list[float] = field(default_factory=list)
    first_tokens: list[float] = field(default_factory=list)
    server_peak_mib: float = 0.0
    worker_peak_mib: float = 0.0
    cut: int = 0
    status: int | str = ""
    headers: str = ""
    answer: str = ""  # the start of its body
    answered_s: float = 0.0


@dataclass
class Measurement:
    kind: str
    windows: list[Window] = field(default_factory=list)


def config_yaml(model_dir: Path, extra: str) -> str:
    return f"""models:
  - name: {MODEL}
    backend: onnx
    path: {model_dir}
    provider: cpu
    context_length: 2048
    keep_alive: -1
    max_concurrent: 8   # the hostile request never takes a stream's slot: admission is not measured here
{extra}"""


def start(config: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"hostile-bench-{port}.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--port", str(port), "--config", str(config)],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited; see {log}")
        try:
            if httpx.get(url + "/api/version", timeout=1).status_code == 200:
                return server, url, log
        except httpx.HTTPError:
            time.sleep(0.2)
    stop(server)
    raise SystemExit(f"the server did not start; see {log}")


def stop(server: subprocess.Popen[bytes]) -> None:
    """The whole session: a frozen worker goes with it."""
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait()


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def resident(server_pid: int) -> tuple[float, float]:
    """MiB resident in the server, and in the rest of its session (the model worker and
    the helpers it starts: the server was started in a session of its own)."""
    others = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != server_pid:
            try:
                if os.getsid(int(proc.name)) == server_pid:
                    others += _rss(int(proc.name))
            except OSError:
                continue
    return _rss(server_pid) / MiB, others / MiB


class Victims:
    """Four streams, each restarted when it ends: the gap before every token, and each
    reply's time to its first token."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.arrivals: list[tuple[float, float]] = []  # (arrival, gap since the stream's previous token)
        self.firsts: list[tuple[float, float]] = []  # (sent, seconds to the first token)
        self.cuts: list[float] = []
        # A stream waiting for the first token of its next reply is not receiving tokens either.
        self.waiting_since: list[float | None] = [None] * STREAMS
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(STREAMS)]

    async def _run(self, index: int) -> None:
        body = {"model": MODEL, "messages": STORY, "options": {"num_predict": 80, "temperature": 0.7, "seed": index}}
        while True:
            sent = time.monotonic()
            first = True
            try:
                async with self.client.stream("POST", "/api/chat", json=body) as reply:
                    if reply.status_code != 200:
                        await reply.aread()
                        await asyncio.sleep(0.2)  # a 503 while unloading: try again shortly
                        continue
                    async for line in reply.aiter_lines():
                        if not line:
                            continue
                        now = time.monotonic()
                        message = json.loads(line)
                        if "error" in message:
                            self.cuts.append(now)
                            break
                        if message.get("done"):
                            break
                        if first:
                            self.firsts.append((sent, now - sent))
                            first = False
                        previous = self.waiting_since[index]
                        if previous is not None:
                            self.arrivals.append((now, now - previous))
                        self.waiting_since[index] = now
            except httpx.HTTPError:
                self.cuts.append(time.monotonic())
                await asyncio.sleep(0.2)

    def window(self, began: float, ended: float, into: Window) -> None:
        closed = [gap for at, gap in self.arrivals if began <= at <= ended]
        into.gaps = closed + [ended - since for since in self.waiting_since if since is not None and since < ended]
        into.first_tokens = [seconds for sent, seconds in self.firsts if began <= sent <= ended]
        into.cut = sum(began <= t <= ended for t in self.cuts)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def watch(server_pid: int, window: Window, until: Callable[[], bool]) -> None:
    while not until():
        server, worker = resident(server_pid)
        window.server_peak_mib = max(window.server_peak_mib, server)
        window.worker_peak_mib = max(window.worker_peak_mib, worker)
        await asyncio.sleep(0.2)


async def quiet_window(victims: Victims, server_pid: int, seconds: float) -> Window:
    window = Window(hostile=False)
    began = time.monotonic()
    await watch(server_pid, window, lambda: time.monotonic() - began >= seconds)
    victims.window(began, time.monotonic(), window)
    return window


async def hostile_window(victims: Victims, server_pid: int, url: str, kind: Kind, cap: float) -> Window:
    window = Window(hostile=True)
    path, body = kind.request(MODEL)
    with tempfile.TemporaryDirectory() as folder:
        payload = Path(folder) / "body.json"
        payload.write_bytes(body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode())
        sent = time.monotonic()
        # From another process: sending 24 MB from this one would stall its own readers.
        hostile = asyncio.create_task(send(url + path, payload, Path(folder) / "answer", cap + 30))
        await watch(server_pid, window, lambda: hostile.done() or time.monotonic() - sent >= cap)
        answered = time.monotonic()
        if hostile.done():
            window.status, window.headers, window.answer = hostile.result()
        else:
            window.status = "no answer"
            hostile.cancel()
        window.answered_s = answered - sent
        until = min(max(answered + 2, sent + 3), sent + cap)
        await watch(server_pid, window, lambda: time.monotonic() >= until)
        victims.window(sent, until, window)
    return window


async def send(url: str, payload: Path, answer: Path, timeout: float) -> tuple[int | str, str, str]:
    """POST the file with curl: its status and its headers with the start of its body, or
    why there was none."""
    headers = answer.with_suffix(".headers")
    process = await asyncio.create_subprocess_exec(
        "curl", "-s", "-o", str(answer), "-D", str(headers), "-w", "%{http_code}", "-m", str(int(timeout)),
        "-H", "content-type: application/json", "--data-binary", f"@{payload}", url,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, _ = await process.communicate()
    except asyncio.CancelledError:
        process.kill()
        raise
    text = out.decode().strip()
    body = answer.read_bytes()[:600].decode(errors="replace") if answer.exists() else ""
    head = headers.read_text(errors="replace") if headers.exists() else ""
    return (int(text) if text.isdigit() and text != "000" else "no answer"), head, body


async def measure(kind: Kind, model_dir: Path, urls: dict[str, str], rounds: int, quiet: float, cap: float) -> Measurement:
    result = Measurement(kind.name)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        file.write(config_yaml(model_dir, kind.config.format(**urls) if kind.peers else kind.config))
    server, url, log = start(Path(file.name))
    try:
        async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(cap + 30)) as client:
            (await client.post("/api/chat", json={"model": MODEL, "messages": []})).raise_for_status()
            victims = Victims(client)
            await asyncio.sleep(3)  # the streams under way
            for round_ in range(rounds):
                for hostile in (False, True) if round_ % 2 == 0 else (True, False):
                    if hostile:
                        window = await hostile_window(victims, server.pid, url, kind, cap)
                    else:
                        window = await quiet_window(victims, server.pid, quiet)
                    result.windows.append(window)
            await victims.close()
    finally:
        stop(server)
        os.unlink(file.name)
        log.unlink(missing_ok=True)
    return result


def summary(window: Window) -> dict[str, Any]:
    """A window as the JSON keeps it: its gaps as quantiles, not one number each."""
    record = asdict(window)
    gaps = record.pop("gaps")
    record["gaps"] = {"count": len(gaps), "p50": statistics.median(gaps) if gaps else None,
                      "p99": p99(gaps), "max": max(gaps, default=None)}  # fmt: skip
    return record


def p99(values: list[float]) -> float | None:
    if len(values) < 2:
        return max(values) if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def checked(kind: Kind, window: Window) -> str:
    status, words = kind.expected
    text = (window.headers + window.answer).lower()
    ok = window.status == status and all(
        (w[1:].lower() not in text) if w.startswith("!") else (w.lower() in text) for w in words
    )
    return "ok" if ok else "UNEXPECTED"


def ratio(hostile: float | None, quiet: float | None, digits: int = 2) -> str:
    return f"{hostile / quiet:.{digits}f}×" if hostile is not None and quiet else "—"


def row(kind: Kind, measurement: Measurement) -> str:
    quiet = [w for w in measurement.windows if not w.hostile]
    loud = [w for w in measurement.windows if w.hostile]
    gap_q, gap_h = p99([g for w in quiet for g in w.gaps]), p99([g for w in loud for g in w.gaps])
    ft_q = [s for w in quiet for s in w.first_tokens]
    ft_h = [s for w in loud for s in w.first_tokens]
    first_q, first_h = (statistics.median(ft_q) if ft_q else None), (statistics.median(ft_h) if ft_h else None)
    mem_q = max(w.server_peak_mib + w.worker_peak_mib for w in quiet)
    mem_h = max(w.server_peak_mib + w.worker_peak_mib for w in loud)
    answers = ", ".join(f"{w.status} in {w.answered_s:.1f} s" for w in loud)
    verdict = "ok" if all(checked(kind, w) == "ok" for w in loud) else "UNEXPECTED"
    return (
        f"| {kind.name} | {kind.row} | {ratio(gap_h, gap_q)} ({(gap_h or 0) * 1000:.0f} / {(gap_q or 0) * 1000:.0f} ms)"
        f" | {ratio(first_h, first_q)} ({(first_h or 0) * 1000:.0f} / {(first_q or 0) * 1000:.0f} ms)"
        f" | {ratio(mem_h, mem_q)} ({mem_h:.0f} / {mem_q:.0f} MiB) | {sum(w.cut for w in loud)}"
        f" | {answers} | {verdict} |"
    )


def table(results: list[Measurement]) -> str:
    lines = [
        "| hostile request | row | victims' p99 gap, with / without | median first token, with / without "
        "| peak RSS server + worker, with / without | streams cut | hostile answer | answer as required |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_name = {k.name: k for k in KINDS}
    lines += [row(by_name[m.kind], m) for m in results]
    return "\n".join(lines)


def write_docs(text: str, command: str, rounds: int) -> None:
    docs = ROOT / "docs" / "benchmarks.md"
    body = docs.read_text(encoding="utf-8")
    heading = "## Hostile requests (issue #9)"
    section = f"""{heading}

Four victim streams of 80 tokens (temperature 0.7, each restarted when it ends) run on
SmolLM2-135M int4 (CPU, batch engine) while the hostile request of each row of issue #9
arrives, {rounds} times per kind, alternating with as many quiet windows on the same
server (a fresh server per kind). Each cell is with the attack / without it: the p99 gap
between consecutive tokens of the victims (across replies, gaps still open at the
window's end included), the median time from sending a victim reply to its first token,
the peak resident memory of the server plus its model worker. A hostile window runs
from the request's arrival until its answer plus 2 s (at least 3 s). Target: gaps at
most 2×. "Answer as required" checks the hostile request's status and that its message
names the limit (the expected status and words are in `bench/hostile.py`'s kinds).
Upstream and image kinds are served by `bench/hostile_peers.py` in a process of its own.
`{command}` on this project's
shared 2-core machine (absolute figures are noisy; compare within a row; the raw output is
`bench/results/hostile_run.txt`).

{text}
"""
    if heading in body:  # replaced up to the end of its table: the notes after it stay
        start = body.index(heading)
        end = body.index("\n\n", body.index("\n| hostile request", start) + 1)
        body = body[:start] + section.rstrip("\n") + body[end:]
    else:
        body = body.rstrip() + "\n\n" + section
    docs.write_text(body, encoding="utf-8")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="hostile windows per kind (as many quiet ones)")
    parser.add_argument("--kinds", help="comma-separated names (default: all)")
    parser.add_argument("--quiet", type=float, default=4.0, help="seconds of a quiet window")
    parser.add_argument("--window-cap", type=float, default=40.0, help="seconds a hostile window may last")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    home = Path(os.environ.get("DRAGOMAN_HOME", Path.home() / ".cache" / "dragoman")).expanduser().resolve()
    model_dir = home / "models" / "smollm2-135m-instruct-int4-cpu"
    if not (model_dir / "genai_config.json").is_file():
        raise SystemExit(f"no model at {model_dir}; run: dragoman models prepare smollm2 (or set DRAGOMAN_HOME)")
    kinds = [k for k in KINDS if not args.kinds or k.name in args.kinds.split(",")]
    peers = hostile_peers.start() if any(k.peers for k in kinds) else None
    results: list[Measurement] = []
    try:
        for kind in kinds:
            result = await measure(kind, model_dir, hostile_peers.URLS, args.rounds, args.quiet, args.window_cap)
            results.append(result)
            for w in result.windows:
                label = f"hostile: {w.status} in {w.answered_s:.1f} s ({checked(kind, w)})" if w.hostile else "quiet"
                print(f"{kind.name} [{label}]: {len(w.gaps)} gaps, p99 {(p99(w.gaps) or 0) * 1000:.0f} ms, "
                      f"first tokens {[round(s, 2) for s in w.first_tokens]}, server {w.server_peak_mib:.0f} MiB, "
                      f"worker {w.worker_peak_mib:.0f} MiB, {w.cut} cut"
                      + (f"; answer {w.answer[:200]!r}" if w.hostile else ""), flush=True)  # fmt: skip
    finally:
        if peers is not None:
            peers.terminate()
            peers.wait()
    text = table(results)
    print()
    print(text)
    if args.write:
        command = "DRAGOMAN_HOME=.dragoman-test-home python bench/hostile.py " + " ".join(sys.argv[1:])
        write_docs(text, command.strip(), args.rounds)
        out = ROOT / "bench" / "results" / "hostile.json"
        out.write_text(json.dumps({
            "machine": platform.platform(), "cores": os.cpu_count(), "args": sys.argv[1:],
            "results": [{"kind": r.kind, "windows": [summary(w) for w in r.windows]} for r in results],
        }, indent=1))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
