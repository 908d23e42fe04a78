"""Tables, the plot and the docs section for the results of ``proxy_overhead.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SECTION = "## Proxy overhead (issue #4)"
SCENARIOS = [(False, 1), (False, 64), (True, 1), (True, 64)]


def _find(data: dict[str, Any], target: str, stream: bool, concurrency: int) -> dict[str, Any] | None:
    return next((r for r in data["results"] if (r["target"], r["stream"], r["concurrency"]) == (target, stream, concurrency)), None)


def render_table(data: dict[str, Any]) -> str:
    chunks = data["chunks"]
    lines = [
        "| target | reply | c | req/s | p50 ms | p99 ms | p50 added vs direct | dragoman CPU per request |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stream, concurrency in SCENARIOS:
        direct = _find(data, "direct", stream, concurrency)
        for r in data["results"]:
            if (r["stream"], r["concurrency"]) != (stream, concurrency):
                continue
            measured = r["p50_ms"] is not None
            added = f"{r['p50_ms'] - direct['p50_ms']:+.3f} ms" if measured and direct and r["target"] != "direct" else ""
            cpu = f"{r['dragoman_cpu_s'] / max(r['requests'], 1) * 1e3:.3f} ms" if r["target"].startswith("dragoman") else ""
            reply = f"stream ({chunks} chunks)" if stream else "whole"
            p50, p99 = (f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}") if measured else ("—", "—")
            lines.append(f"| {r['target']} | {reply} | {concurrency} | {r['req_per_s']:,.0f} | {p50} | {p99} | {added} | {cpu} |")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {line}" for line in verdicts(data))


def verdicts(data: dict[str, Any]) -> list[str]:
    out = []
    chunks = data["chunks"]
    drag, direct = _find(data, "dragoman", False, 1), _find(data, "direct", False, 1)
    if drag and direct:
        added = drag["p50_ms"] - direct["p50_ms"]
        out.append(f"p50 added latency, whole reply, c=1: {added:.3f} ms (target < 1 ms): {'met' if added < 1 else 'MISSED'}")
    ratios = []
    for stream, concurrency in SCENARIOS:
        d, lite = _find(data, "dragoman", stream, concurrency), _find(data, "litellm", stream, concurrency)
        if d and lite and lite["req_per_s"]:
            ratios.append((d["req_per_s"] / lite["req_per_s"], stream, concurrency))
    if ratios:
        text = ", ".join(f"{'stream' if s else 'whole'} c={c}: {x:.1f}×" for x, s, c in ratios)
        worst = min(x for x, _, _ in ratios)
        out.append(f"req/s against LiteLLM {data['litellm_version']}: {text} (target ≥ 3×): {'met' if worst >= 3 else 'MISSED'}")
    else:
        out.append(f"LiteLLM: {data['litellm_note']}")
    dd = _find(data, "direct", True, 1)
    for target, how in (("dragoman", "deltas that arrive together coalesced, the default"),
                        ("dragoman (coalesce off)", "every upstream chunk forwarded as its own frame")):
        ds = _find(data, target, True, 1)
        if ds and dd:
            per_chunk = (ds["p50_ms"] - dd["p50_ms"]) / chunks * 1000
            verdict = "met" if per_chunk < 50 else "MISSED"
            out.append(f"stream chunk overhead, c=1, {chunks} chunks written back to back, {how}: "
                       f"({ds['p50_ms']:.3f} − {dd['p50_ms']:.3f} ms) / {chunks} = {per_chunk:.1f} µs (target < 50 µs): {verdict}")
    paced = data["paced"]
    out.append(f"CPU per chunk when every chunk arrives alone ({paced['gap_ms']:g} ms apart, coalescing off, c=1): dragoman "
               f"{paced['cpu_us_per_chunk']:.1f} µs (receive, decode, encode, send; request overhead included); a bare "
               f"aiohttp client only receiving the same stream: {paced.get('floor_cpu_us_per_chunk', float('nan')):.1f} µs")
    return out


def write_plot(data: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(r["target"] for r in data["results"]))
    labels = [f"{'stream' if s else 'whole'}\nc={c}" for s, c in SCENARIOS]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(targets)
    for metric, ax, title in (("req_per_s", axes[0], "requests/s (higher is better)"),
                              ("p50_ms", axes[1], "p50 latency, ms (lower is better)")):
        for i, target in enumerate(targets):
            values = [(_find(data, target, s, c) or {}).get(metric) or 0 for s, c in SCENARIOS]  # 0: not run
            xs = [x + (i - (len(targets) - 1) / 2) * width for x in range(len(SCENARIOS))]
            ax.bar(xs, values, width, label=target)
        ax.set_xticks(range(len(SCENARIOS)), labels)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(targets), fontsize=8, frameon=False)
    fig.suptitle(f"Proxy overhead: canned upstream, {data['chunks']}-chunk streams — {data['machine']}", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def update_docs(path: Path, table: str, command: str, plot_name: str, data: dict[str, Any]) -> None:
    """Replaces this benchmark's section of ``path`` (or appends it), leaving the rest."""
    section = (
        f"{SECTION}\n\n"
        f"Added latency and throughput of dragoman in front of an OpenAI-compatible upstream, next to calling the\n"
        f"upstream directly and to LiteLLM's proxy, measured in one run on {data['machine']}.\n"
        f"Every server is its own process on loopback: a canned-reply upstream (raw asyncio + uvloop), dragoman\n"
        f"started as `dragoman serve` does (uvicorn, JSON access log to a file), LiteLLM's proxy (one worker,\n"
        f"in its own venv), and a closed-loop load generator; {data['duration']:g} s measured per row after a warm-up.\n"
        f"All processes share the same cores, so the figures are ratios measured side by side, not absolutes.\n"
        f"At c=64 the load is closed-loop, so latency there is mostly queueing: compare req/s.\n"
        f"The benchmark's own tools (LiteLLM, matplotlib; uvloop and aiohttp for the load generator and the\n"
        f"canned upstream) live in a separate, git-ignored venv, never in the server's:\n\n"
        f"```\npython3 -m venv .bench-venv && .bench-venv/bin/pip install 'litellm[proxy]' matplotlib uvloop aiohttp\n"
        f"{command}\n```\n\n{table}\n\n![proxy overhead]({plot_name})\n"
    )
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
