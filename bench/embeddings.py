"""Embeddings benchmark (issue #11): dragoman over HTTP against a raw onnxruntime loop.

    .venv/bin/python bench/embeddings.py [--rounds 5] [--write]

On the default embedding model (all-MiniLM-L6-v2, fp32, CPU), side by side in one run,
alternating within every round (the machine is shared; ratios from one run count):

1. inputs/s for 1, 16 and 256 short inputs per request: ``POST /api/embed`` to a
   ``dragoman serve`` process started here (httpx, keep-alive, the JSON reply parsed)
   against a raw loop in this process over the same ONNX file: the same tokenizer,
   right padding, ``InferenceSession.run`` in batches of the server's ``batch_size``,
   mean pooling and normalisation — what a program embedding for itself would do;
2. batch sharing: 16 clients each sending one input at once, against a second server
   whose entry has ``batch_size: 1`` (every request its own model run);
3. event-loop lag: ``GET /api/version`` latency from a prober thread while 256-input
   requests run (inference is on a worker thread, never on the event loop);
4. RSS of the server process: idle after load, and peak while measuring.

``--write`` puts the table into ``docs/benchmarks.md`` (section "Embeddings (issue
#11)") and ``bench/results/embeddings.json``. Needs the ``bench`` extra (psutil).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dragoman.backends.onnx.embeddings.build import default_embedding_path, prepare_all_minilm  # noqa: E402
from tests.support.server import free_port  # noqa: E402

SIZES = (1, 16, 256)
MiB = 1024 * 1024
SECTION = "## Embeddings (issue #11)"


def texts(n: int, offset: int = 0) -> list[str]:
    topics = ["cats", "the weather", "databases", "football", "cooking", "music", "space travel"]
    return [f"Short sentence {offset + i} about {topics[(offset + i) % len(topics)]} and more." for i in range(n)]


class RawLoop:
    """What a program embedding for itself does with the same model file."""

    def __init__(self, folder: Path, batch_size: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(256)
        self.batch_size = batch_size

    def embed(self, inputs: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(inputs), self.batch_size):
            encodings = self.tokenizer.encode_batch(inputs[start : start + self.batch_size])
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for i, e in enumerate(encodings):
                ids[i, : len(e.ids)] = e.ids
                mask[i, : len(e.ids)] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, feed)[0]
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        return np.concatenate(out)


def start_server(config: Path, port: int, home: Path) -> subprocess.Popen[bytes]:
    log = open(Path(tempfile.gettempdir()) / f"embed-bench-{port}.log", "wb")
    env = {**os.environ, "DRAGOMAN_HOME": str(home)}
    command = [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"dragoman serve exited with {server.returncode}; see {log.name}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=1)
            return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("dragoman serve did not answer within 60 s")


def rate(seconds: list[float], count: int) -> float:
    return count / statistics.median(seconds)


def timed(call: Any, minimum: float = 0.6) -> float:
    """Seconds per call, repeating short calls until ``minimum`` seconds have passed."""
    calls, began = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        spent = time.perf_counter() - began
        if spent >= minimum:
            return spent / calls


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    home = Path(os.environ.get("DRAGOMAN_HOME", ROOT / ".dragoman-test-home"))
    folder = prepare_all_minilm(home, progress=True)
    assert folder == default_embedding_path(home)
    config = Path(tempfile.mkdtemp()) / "embed-bench.yaml"
    config.write_text(
        f"models:\n"
        f"  - {{name: all-minilm, backend: onnx, task: embed, path: '{folder}', provider: cpu, keep_alive: -1}}\n"
        f"  - {{name: unshared, backend: onnx, task: embed, path: '{folder}', provider: cpu, keep_alive: -1, batch_size: 1}}\n"
        "server: {limits: {max_embed_inputs: 4096}}\n"
    )
    port = free_port()
    server = start_server(config, port, home)
    process = psutil.Process(server.pid)
    url = f"http://127.0.0.1:{port}"
    raw = RawLoop(folder, batch_size=32)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.05)

    try:
        client = httpx.Client(timeout=120)

        def served(model: str, inputs: list[str]) -> np.ndarray:
            reply = client.post(f"{url}/api/embed", json={"model": model, "input": inputs})
            reply.raise_for_status()
            return np.asarray(reply.json()["embeddings"], dtype=np.float32)

        for model in ("all-minilm", "unshared"):
            served(model, texts(4))
        check = np.abs(served("all-minilm", texts(16)) - raw.embed(texts(16))).max()
        idle_rss = process.memory_info().rss
        threading.Thread(target=sample, daemon=True).start()
        results: dict[str, Any] = {"max_abs_difference_http_vs_raw": float(check), "rounds": args.rounds}
        per_size: dict[int, dict[str, list[float]]] = {n: {"http": [], "raw": []} for n in SIZES}
        shared: dict[str, list[float]] = {"shared": [], "unshared": []}
        lags: list[float] = []
        for round_ in range(args.rounds):
            for n in SIZES:
                batch = texts(n, offset=round_ * 1000)
                order = [("http", lambda: served("all-minilm", batch)), ("raw", lambda: raw.embed(batch))]
                for name, call in order if round_ % 2 == 0 else order[::-1]:
                    per_size[n][name].append(timed(call))
            with ThreadPoolExecutor(16) as pool:
                for name, model in (("shared", "all-minilm"), ("unshared", "unshared"))[:: 1 if round_ % 2 == 0 else -1]:
                    def burst(model: str = model) -> None:
                        list(pool.map(lambda i: served(model, texts(1, offset=i)), range(16)))

                    shared[name].append(timed(burst))
            # event-loop lag while 256-input requests run
            done = threading.Event()

            def probe() -> None:
                with httpx.Client() as prober:
                    while not done.is_set():
                        began = time.perf_counter()
                        prober.get(f"{url}/api/version")
                        lags.append(time.perf_counter() - began)
                        time.sleep(0.01)

            prober = threading.Thread(target=probe)
            prober.start()
            for _ in range(3):
                served("all-minilm", texts(256, offset=round_))
            done.set()
            prober.join()
        stop.set()
        for n in SIZES:
            http = [n / s for s in per_size[n]["http"]]
            rw = [n / s for s in per_size[n]["raw"]]
            ratios = [a / b for a, b in zip(http, rw)]
            results[f"inputs_{n}"] = {
                "http_inputs_per_s": statistics.median(http), "raw_inputs_per_s": statistics.median(rw),
                "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            }  # fmt: skip
        speedups = [u / s for s, u in zip(shared["shared"], shared["unshared"])]
        results["sharing_16_clients"] = {
            "shared_inputs_per_s": 16 / statistics.median(shared["shared"]),
            "unshared_inputs_per_s": 16 / statistics.median(shared["unshared"]),
            "speedup": statistics.median(speedups), "speedup_min": min(speedups), "speedup_max": max(speedups),
        }  # fmt: skip
        lags.sort()
        results["version_latency_ms_under_load"] = {
            "p50": lags[len(lags) // 2] * 1000, "p99": lags[int(len(lags) * 0.99)] * 1000, "samples": len(lags),
        }  # fmt: skip
        results["rss_mib"] = {"idle_loaded": idle_rss / MiB, "peak": peak[0] / MiB}
        results["machine"] = {"cpus": os.cpu_count(), "load_avg": os.getloadavg()[0]}
    finally:
        stop.set()
        server.terminate()
        server.wait(30)
    table = render(results)
    print(table)
    if args.write:
        (ROOT / "bench" / "results").mkdir(exist_ok=True)
        (ROOT / "bench" / "results" / "embeddings.json").write_text(json.dumps(results, indent=2))
        write_section(table)
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [
        "| inputs per request | HTTP inputs/s | raw inputs/s | HTTP / raw (median [min–max]) |",
        "|---|---|---|---|",
    ]
    for n in SIZES:
        x = r[f"inputs_{n}"]
        lines.append(
            f"| {n} | {x['http_inputs_per_s']:.0f} | {x['raw_inputs_per_s']:.0f} | "
            f"{x['ratio']:.2f}× [{x['ratio_min']:.2f}–{x['ratio_max']:.2f}] |"
        )
    s = r["sharing_16_clients"]
    lag = r["version_latency_ms_under_load"]
    lines += [
        "",
        f"- 16 clients × 1 input at once: shared batches {s['shared_inputs_per_s']:.0f} inputs/s, "
        f"one run per request (`batch_size: 1`) {s['unshared_inputs_per_s']:.0f} inputs/s: "
        f"**{s['speedup']:.2f}×** [{s['speedup_min']:.2f}–{s['speedup_max']:.2f}].",
        f"- `GET /api/version` while 256-input requests run: p50 {lag['p50']:.1f} ms, p99 {lag['p99']:.1f} ms "
        f"({lag['samples']} probes).",
        f"- Server RSS: {r['rss_mib']['idle_loaded']:.0f} MiB with the model loaded and idle, "
        f"peak {r['rss_mib']['peak']:.0f} MiB while measuring.",
        f"- HTTP and raw vectors agree within {r['max_abs_difference_http_vs_raw']:.1e}; {r['rounds']} rounds, "
        f"{r['machine']['cpus']} CPUs, load average {r['machine']['load_avg']:.1f} at the end.",
    ]
    return "\n".join(lines)


def write_section(table: str) -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    body = (
        f"{SECTION}\n\n`bench/embeddings.py` starts `dragoman serve` with all-MiniLM-L6-v2 (fp32, CPU) and, "
        "alternating in every round, times `POST /api/embed` (httpx, keep-alive, JSON parsed) against a raw "
        "loop in the same process over the same ONNX file (same tokenizer, right padding, "
        "`InferenceSession.run` in batches of 32, mean pooling, normalisation). Short inputs "
        "(about 12 tokens).\n\n```\n.venv/bin/python bench/embeddings.py --write\n```\n\n" + table + "\n"
    )
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + body + (text[end:] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    doc.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
