"""Build time and peak memory of ``dragoman models prepare`` (issue #12), per source
kind and target, on the default model (SmolLM2-135M-Instruct, Q4_1 GGUF, 135M parameters).

    .venv/bin/python bench/prepare_builds.py [--write]

Every build runs from scratch into a temporary DRAGOMAN_HOME (nothing is reused), one
after another, as ``python -m backends.onnx.prepare SOURCE --provider P --precision Q``
— the same command users run. The figures come from each build's marker: wall time per
stage and the peak RSS of the build's worker process (its VmHWM, sampled every 0.1 s).
Next to each, the estimate ``prepare`` checks against free memory and disk before it
starts, and the measured/estimated ratio (the check refuses when the estimate exceeds
what is available, so a ratio ≤ 1 means it never refuses a build that would fit).
About 8 minutes on 2 cores. ``--write`` replaces the section "Model builds (issue #12)"
of docs/benchmarks.md and writes bench/results/prepare_builds.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.onnx.prepare import find_gguf  # noqa: E402
from backends.onnx.prepare.build import estimate  # noqa: E402
from backends.onnx.prepare.catalogue import builds  # noqa: E402
from backends.onnx.prepare.sources import resolve  # noqa: E402
from bench.onnx_decode_report import write_section  # noqa: E402
from tests.support.ollama_store import SMOLLM2_TEMPLATE, Store  # noqa: E402

SECTION = "## Model builds (issue #12)"
TARGETS = [("gguf", "cpu", "int4"), ("gguf", "cpu", "fp32"), ("gguf", "dml", "int4"), ("gguf", "dml", "fp16"),
           ("gguf", "cuda", "int4"), ("gguf", "cuda", "fp16"), ("hf", "cpu", "int4"), ("ollama", "cpu", "int4")]  # fmt: skip
MiB = 1 << 20


def make_sources(work: Path) -> dict[str, str]:
    gguf = find_gguf()
    store = Store(work / "ollama")
    store.add_model("smollm2", "135m", gguf, template=SMOLLM2_TEMPLATE, params={"stop": ["<|im_start|>", "<|im_end|>"]})
    hf = work / "SmolLM2-135M-Instruct"
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from backends.onnx.prepare.worker import "
                    "convert_gguf; convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]), [])", str(gguf), str(hf)],
                   check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    print(f"made the HF folder from the GGUF in {time.perf_counter() - began:.1f}s", file=sys.stderr)
    return {"gguf": str(gguf), "hf": str(hf), "ollama": "ollama:smollm2:135m"}


def run(work: Path) -> list[dict[str, object]]:
    sources = make_sources(work)
    os.environ["OLLAMA_MODELS"] = str(work / "ollama")  # for resolve() here and the builds
    env = dict(os.environ)
    rows = []
    for kind, provider, precision in TARGETS:
        home = work / f"home-{kind}-{provider}-{precision}"
        env["DRAGOMAN_HOME"] = str(home)
        source = resolve(sources[kind], home=home)
        need = estimate(source, precision)
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "backends.onnx.prepare", sources[kind], "--provider", provider,
                        "--precision", precision, "--print-path"], check=True, cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        wall = time.perf_counter() - began
        (build,) = builds(home)
        record = build.record
        stages = {s.name: s.seconds for s in record.stages}
        row = {
            "source": kind, "provider": provider, "precision": precision, "wall_s": round(wall, 1),
            "convert_s": stages.get("convert", 0.0), "build_s": stages.get("build", 0.0),
            "peak_rss_mib": round(record.peak_rss / MiB), "estimate_mib": round(need.memory / MiB),
            "size_mib": round(build.size / MiB, 1), "disk_estimate_mib": round(need.disk / MiB),
        }  # fmt: skip
        row["rss_ratio"] = round(record.peak_rss / need.memory, 2)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
        shutil.rmtree(home, ignore_errors=True)
    return rows


def section(rows: list[dict[str, object]]) -> str:
    lines = [
        SECTION, "",
        "Measured by `.venv/bin/python bench/prepare_builds.py --write`: each build from scratch, one after another, "
        "on this project's shared 2-core machine (absolute times are noisy; the memory figures are not). "
        "SmolLM2-135M-Instruct (135M parameters, Q4_1 GGUF, 98 MB). *Peak RSS* is the build worker's high-water "
        "mark; *estimate* is what `prepare` checks against available memory before it starts.", "",
        "| source | target | wall | dequantize | builder | peak RSS | estimate | RSS / estimate | output | disk estimate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['source']} | {r['provider']} {r['precision']} | {r['wall_s']} s | {r['convert_s'] or '–'} s | "
            f"{r['build_s']} s | {r['peak_rss_mib']} MiB | {r['estimate_mib']} MiB | {r['rss_ratio']} | "
            f"{r['size_mib']} MiB | {r['disk_estimate_mib']} MiB |"
        )
    lines += ["", "The HF source skips the dequantize stage (the builder reads the folder itself); the Ollama source "
              "is the GGUF blob, so it costs what the GGUF file costs. A GPU target (`dml`, `cuda`) is built on "
              "any OS: its cost here is the cost on the user's machine, before the GPU is involved.", ""]  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prepare-bench-") as tmp:
        rows = run(Path(tmp))
    text = section(rows)
    print(text)
    if args.write:
        (ROOT / "bench" / "results").mkdir(exist_ok=True)
        (ROOT / "bench" / "results" / "prepare_builds.json").write_text(json.dumps(rows, indent=1) + "\n")
        write_section(ROOT / "docs" / "benchmarks.md", text, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
