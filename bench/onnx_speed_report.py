"""The table, the plot and the docs section for ``onnx_speed.py`` (and ``proxy_workers.py``)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from cpu_info import Cpu
from onnx_decode_report import paired, percentile, rounded, write_section

SECTION = "## Speed where users feel it (issue #14)"
OURS = "dragoman"
RAW = "raw loop"
GENERATOR = "dragoman, generator engine"  # the same config with engine: generator
# Next turn ÷ cold: issue 14's target for the default engine, issue 23's for the Generator
# (its prefix reuse continues a kept generator state, which cannot skip the reply's tokens).
NEXT_TURN_TARGET = {OURS: 0.25, GENERATOR: 0.35}
med = statistics.median


def _fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}{unit}"


def _verdict(ratio: float | None, target: float, *, at_most: bool) -> str:
    if ratio is None:
        return "–"
    ok = ratio <= target if at_most else ratio >= target
    return f"{ratio:.2f}× {'✓' if ok else '✗ (target ' + ('≤ ' if at_most else '≥ ') + f'{target}×)'}"


def _peers(series: dict[str, Any]) -> list[str]:
    return [name for name in series if name.startswith("llama.cpp")]


def _best(series: dict[str, list[float]], *, high: bool) -> str | None:
    """The llama.cpp variant with the better median (more tok/s, or fewer ms)."""
    names = _peers(series)
    if not names:
        return None
    return (max if high else min)(names, key=lambda n: med(series[n]))


def _by_round(values: list[float], rounds: int) -> list[float]:
    """Per-round medians of a series with several samples a round."""
    size = max(1, len(values) // rounds)
    return [med(values[i : i + size]) for i in range(0, size * rounds, size)]


def servers(out: dict[str, Any]) -> list[str]:
    return [OURS, *([out["before"]] if out.get("before") else [])]


def rows(out: dict[str, Any]) -> list[tuple[str, ...]]:
    """(what, dragoman, [before], reference, ratio) rows of the summary table."""
    rounds = out["args"]["rounds"]
    table: list[tuple[str, ...]] = []
    names = servers(out)

    def line(what: str, figures: dict[str, str], reference: str, ratio: str) -> None:
        table.append((what, *(figures.get(n, "–") for n in names), reference, ratio))

    def figures(series: dict[str, list[float]], engine: str, digits: int = 0) -> dict[str, str]:
        """Each server's column; the generator-engine server's figure goes in dragoman's
        column, on rows of its own."""
        shown = [GENERATOR] if engine == GENERATOR else names
        return {OURS if n == GENERATOR else n: _fmt(med(series[n]), digits=digits) for n in shown}

    for engine in _engines(out):
        suffix = " — **generator engine**" if engine == GENERATOR else ""
        if "decode" in out and engine in out["decode"]:
            decode, ttft = out["decode"], out["ttft"]
            llama = _best(decode, high=True)
            vs_raw = med(paired(decode[engine], decode[RAW], "/"))
            vs_llama = med(paired(decode[engine], decode[llama], "/")) if llama else None
            line(f"decode tok/s, {out['args']['new_tokens']} new tokens{suffix}",
                 figures(decode, engine, 1),
                 f"raw loop {med(decode[RAW]):.1f}" + (f"; {llama} {med(decode[llama]):.1f}" if llama else ""),
                 f"{_verdict(vs_raw, 0.95, at_most=False)} raw"
                 + (f", {_verdict(vs_llama, 1.0, at_most=False)} llama.cpp" if llama else ""))  # fmt: skip
            ours = _by_round(ttft[engine], rounds)
            raw = _by_round(ttft[RAW], rounds)
            added = med(paired(ours, raw, "-"))
            line(f"first token, {out['ttft_prompt_tokens']}-token prompt (ms){suffix}",
                 figures(ttft, engine, 1),
                 f"raw loop {med(ttft[RAW]):.1f}",
                 f"{added:+.1f} ms {'✓' if added < 10 else '✗ (target < 10 ms)'}")  # fmt: skip
        if "chat" in out and engine in out["chat"]["next_turn_ms"]:
            warm, cold = out["chat"]["next_turn_ms"], out["chat"]["cold_ms"]
            target = NEXT_TURN_TARGET[engine]
            llama = _best(warm, high=False)
            ratio = med(paired(warm[engine], cold[engine], "/"))
            vs_llama = med(paired(warm[engine], warm[llama], "/")) if llama else None
            line(f"**next turn of a 6-turn chat of {out['chat_prompt_tokens']} tokens** (first token, ms){suffix}",
                 figures(warm, engine),
                 f"cold {med(cold[engine]):,.0f}" + (f"; {llama} over its cached history {med(warm[llama]):,.0f}"
                                                     f" (cold {med(cold[llama]):,.0f})" if llama else ""),
                 f"{_verdict(ratio, target, at_most=True)} cold"
                 + (f", {_verdict(vs_llama, 1.0, at_most=True)} llama.cpp" if llama else ""))  # fmt: skip
            if paused := out["chat"].get("paused_next_turn_ms"):
                ratio = med(paired(paused[engine], cold[engine], "/"))
                vs_llama = med(paired(paused[engine], warm[llama], "/")) if llama else None
                line(f"the same, sent {out['chat']['pause_s']:g} s after the answer (first token, ms){suffix}",
                     figures(paused, engine),
                     f"cold {med(cold[engine]):,.0f}" + (f"; {llama} at once {med(warm[llama]):,.0f}" if llama else ""),
                     f"{_verdict(ratio, target, at_most=True)} cold"
                     + (f", {_verdict(vs_llama, 1.0, at_most=True)} llama.cpp" if llama else ""))  # fmt: skip
    if "shared_system" in out:
        warm, cold = out["shared_system"]["shared_ms"], out["shared_system"]["cold_ms"]
        ratio = med(paired(warm[OURS], cold[OURS], "/"))
        llama = _best(warm, high=False)
        line(f"a {out['system_prompt_tokens']}-token system prompt shared by different requests (first token, ms)",
             {n: _fmt(med(warm[n])) for n in names},
             f"cold {med(cold[OURS]):,.0f}" + (f"; {llama} {med(warm[llama]):,.0f}" if llama else ""),
             f"{_verdict(ratio, 0.25, at_most=True)} cold")  # fmt: skip
    if "aggregate" in out:
        agg = out["aggregate"]

        def scaled(name: str, streams: str) -> float:
            return med(paired(agg[name][streams], agg[name]["1"], "/"))

        line("aggregate tok/s, 1 / 4 / 8 concurrent streams",
             {n: " / ".join(f"{med(agg[n][s]):.0f}" for s in ("1", "4", "8")) for n in names}, "–",
             f"4: {_verdict(scaled(OURS, '4'), 1.6, at_most=False)}, 8: {_verdict(scaled(OURS, '8'), 2.0, at_most=False)}")
    if "gaps" in out:
        gaps = out["gaps"]

        def p99(name: str, key: str) -> float | None:
            return percentile(gaps[name][key], 99) if gaps[name][key] else None

        quiet, during = p99(OURS, "quiet"), p99(OURS, "during")
        line(f"inter-token gap p99 of 3 streams while a {out['gap_prompt_tokens']}-token prompt is prefilled (ms)",
             {n: _fmt(p99(n, "during")) for n in names}, f"the same streams quiet: {_fmt(quiet)}",
             _verdict(during / quiet if quiet and during else None, 3.0, at_most=True))  # fmt: skip
    if "proxy" in out:
        proxy = out["proxy"]
        line(f"proxy req/s at c={proxy['concurrency']}, `openai` backend → canned upstream",
             {OURS: f"{med(proxy['dragoman']):,.0f}"},
             f"bare pass-through {med(proxy['bare']):,.0f}",
             f"{_verdict(med(paired(proxy['dragoman'], proxy['bare'], '/')), 0.8, at_most=False)} bare")
        cpu = proxy.get("cpu_us_per_request", {})
        if cpu.get("dragoman") and cpu.get("bare"):
            line("proxy CPU µs per request (all processes of the server)", {OURS: f"{med(cpu['dragoman']):.0f}"},
                 f"bare pass-through {med(cpu['bare']):.0f}", f"{med(cpu['dragoman']) / med(cpu['bare']):.2f}×")
        if proxy.get("dragoman, 2 workers"):
            by = f" ({proxy['apparatus_label']})" if proxy.get("apparatus_label", "python") != "python" else ""
            line(f"proxy req/s, 2 workers{by}", {OURS: f"{med(proxy['dragoman, 2 workers']):,.0f}"},
                 f"1 worker {med(proxy['dragoman']):,.0f}",
                 _verdict(med(paired(proxy["dragoman, 2 workers"], proxy["dragoman"], "/")), 1.7, at_most=False))
    if "rss_peak_mib" in out:
        after, idle = out["rss_after_warmup_mib"], out.get("rss_idle_end_mib", {})
        cache = out.get("prefix_cache_mib", 256)
        bound = after.get(OURS, 0) + cache
        line("model worker RSS (MiB): after warm-up → peak → idle at the end",
             {n: f"{after.get(n, 0):.0f} → " + (f"{out['rss_peak_mib']['worker']:.0f}" if n == OURS else "–")
                 + f" → {idle.get(n, 0):.0f}" for n in names},
             f"prefix cache bound {cache} MiB (prefix_cache_mib): warm-up + bound = {bound:.0f}",
             f"idle {'within' if idle.get(OURS, 0) <= bound else 'above'} the bound" if idle else "–")  # fmt: skip
    return table


def _engines(out: dict[str, Any]) -> list[str]:
    """dragoman's rows first, then the generator-engine server's where it ran."""
    ran = {*out.get("decode", {}), *out.get("chat", {}).get("next_turn_ms", {})}
    return [OURS, *([GENERATOR] if GENERATOR in ran else [])]


def cpu_text(out: dict[str, Any]) -> str:
    """The CPU a run was on; results written before runs recorded it say so."""
    return "CPU " + Cpu(**out["cpu"]).describe() if out.get("cpu") else "CPU not recorded"


def engines_text(out: dict[str, Any]) -> str:
    engines = out.get("engines")
    if not engines:
        return ""
    said = [f"{name}: {e['engine']}" + (f" ({e['reason']})" if e["reason"] else "") for name, e in engines.items()]
    return " Engines, as `/api/ps` said: " + "; ".join(said) + "."


def render(out: dict[str, Any]) -> str:
    names = servers(out)
    header = ["", *names, "reference", "ratio"]
    lines = [
        SECTION,
        "",
        f"`{out['command']}` — {out['machine']}, {cpu_text(out)}, load average {out['load_at_start']} at the start and "
        f"{out.get('load_at_end', '?')} at the end (a shared machine), onnxruntime-genai {out['onnxruntime_genai']}, "
        f"Python {out['python']}; {out.get('seconds', 0):.0f} s in all. Model: SmolLM2-135M-Instruct int4 (CPU build); "
        "llama.cpp: node-llama-cpp 3.21.1's prebuilt CPU build on the Q4_1 GGUF the model is built from. "
        "Greedy everywhere. Figures are medians over rounds in which the variants alternate; ratios are "
        "medians of per-round ratios." + engines_text(out),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows(out)),
        "",
    ]
    return "\n".join(lines)


def research(data: dict[str, Any]) -> str:
    """``batching_research.py``'s results: which batching wins on CPU."""
    decode = data["decode_tok_s"]
    names = list(decode)
    lines = [
        "### Which batching wins on CPU (`python bench/batching_research.py`)",
        "",
        f"Aggregate decode tok/s of N rows of the same prompt, {data['tokens']} new tokens, prefill left out, "
        f"{cpu_text(data)}; "
        "the library's batched Generator (`batch_size` = N, static) against the exported decoder's "
        "onnxruntime session run directly (one row each, what the batch engine does). Per pass the "
        "library's batched Generator is the faster of the two here (it appears to keep its own thread "
        "pool; see the decode note above), but it is static: its rows start together, none joins "
        "later, none can be rewound or dropped, so requests that arrive at different times cannot "
        "share it. The session can, which is why the worker uses it: served, 4 and 8 concurrent "
        "streams gave 1.8× and 2.2× one stream (table above), where a Generator per request stayed "
        "flat. Prefill: 64-token chunks beat one pass over the whole prompt.",
        "",
        "| rows | " + " | ".join(names) + " | session ÷ Generator |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for rows in decode[names[0]]:
        a, b = (med(decode[n][rows]) for n in names)
        lines.append(f"| {rows} | {a:.0f} | {b:.0f} | {b / a:.2f}× |")
    lines += ["", "| a 1,500-token prompt | ms |", "|---|---|"]
    lines += [f"| {k} | {med(v):,.0f} |" for k, v in data["prefill_ms"].items()]
    return "\n".join(lines) + "\n"


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = servers(out)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ttft_rows = [("chat", "next_turn_ms", "cold_ms", "next chat turn"), ("shared_system", "shared_ms", "cold_ms", "shared system prompt")]
    ax = axes[0]
    labels, values = [], []
    for key, warm, cold, title in ttft_rows:
        if key not in out:
            continue
        for name in [*names, *_peers(out[key][warm])]:
            labels.append(f"{title}\n{name}")
            values.append(med(out[key][warm][name]))
        labels.append(f"{title}\ncold")
        values.append(med(out[key][cold][OURS]))
    ax.barh(labels, values, color="tab:blue")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("time to first token (ms, log)")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax = axes[1]
    if "aggregate" in out:
        for name in names:
            agg = out["aggregate"][name]
            ax.plot([1, 4, 8], [med(agg[s]) for s in ("1", "4", "8")], marker="o", label=name)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel("aggregate tok/s")
        ax.legend()
    ax = axes[2]
    if "gaps" in out:
        xs = range(len(names))
        quiet = [percentile(out["gaps"][n]["quiet"], 99) if out["gaps"][n]["quiet"] else 0 for n in names]
        during = [percentile(out["gaps"][n]["during"], 99) if out["gaps"][n]["during"] else 0 for n in names]
        ax.bar([x - 0.2 for x in xs], quiet, 0.4, label="quiet")
        ax.bar([x + 0.2 for x in xs], during, 0.4, label="during a long prefill")
        ax.set_xticks(list(xs), names)
        ax.set_yscale("log")
        ax.set_ylabel("inter-token gap p99 (ms, log)")
        ax.legend()
    fig.suptitle("SmolLM2-135M int4 on 2 CPU cores, one run, variants alternating")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: dict[str, Any], root: Path) -> None:
    results = root / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    proxy = results / "proxy_workers.json"
    if proxy.is_file() and "proxy" not in out:
        out = {**out, "proxy": json.loads(proxy.read_text(encoding="utf-8"))}
    (results / "onnx_speed.json").write_text(json.dumps(rounded(out), separators=(",", ":")) + "\n", encoding="utf-8")
    plot(out, root / "docs" / "onnx_speed.png")
    extra = ""
    notes = root / "bench" / "onnx_speed_notes.md"
    if notes.is_file():
        extra += "\n" + notes.read_text(encoding="utf-8")
    batching = results / "batching_research.json"
    if batching.is_file():
        extra += "\n" + research(json.loads(batching.read_text(encoding="utf-8")))
    write_section(root / "docs" / "benchmarks.md", render(out) + "\n![speed](onnx_speed.png)\n" + extra, SECTION)
    print(f"wrote docs/benchmarks.md ({SECTION}), docs/onnx_speed.png, bench/results/onnx_speed.json")
