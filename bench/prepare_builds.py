"""Build time and peak memory of ``dragoman models prepare`` (issue #12), per source
kind and target, on the default model (SmolLM2-135M-Instruct, Q4_1 GGUF, 135M parameters).

    .venv/bin/python bench/prepare_builds.py [--write]

Every build runs from scratch into a temporary DRAGOMAN_HOME (nothing is reused), one
after another, as ``python -m dragoman.backends.onnx.prepare SOURCE --provider P --precision Q``
— the same command users run. The figures come from each build's marker: wall time per
stage and the peak RSS of the build's worker process (its VmHWM, sampled every 0.1 s).
Next to each, the estimate ``prepare`` checks against free memory and disk before it
starts, and the measured/estimated ratio (the check refuses when the estimate exceeds
what is available, so a ratio ≤ 1 means it never refuses a build that would fit).
Then the same on random weights in Qwen2.5-0.5B's shape (494M parameters), from an HF
folder and a GGUF, for the estimate's slope. About 15 minutes on 2 cores, ~8 GiB at peak. ``--write`` replaces the section "Model builds (issue #12)"
of docs/benchmarks.md and writes bench/results/prepare_builds.json.

    .venv/bin/python bench/prepare_builds.py --shapes qwen2.5-0.5b,qwen2.5-1.5b,llama-3.2-3b [--types Q8_0,Q4_0] [--write]

The streaming build (issue 26): random-weight GGUFs in real models' shapes
(bench/random_gguf.py, written tensor by tensor), each built int4 for CPU, one at a time,
recording peak RSS, the most disk the build's home held while it ran (the GGUF is
outside it), time and bytes per parameter; and today's full-model path
(DRAGOMAN_BUILD_PATH=full) beside it on the first shape's first type. ``--write``
replaces the section "Streaming builds (issue 26)" and writes
bench/results/prepare_shapes.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from dragoman.backends.onnx.prepare import find_gguf  # noqa: E402
from dragoman.backends.onnx.prepare.build import estimate  # noqa: E402
from dragoman.backends.onnx.prepare.catalogue import builds  # noqa: E402
from dragoman.backends.onnx.prepare.sources import resolve  # noqa: E402
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
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from dragoman.backends.onnx.prepare.worker import "
                    "convert_gguf; convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]), [])", str(gguf), str(hf)],
                   check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    print(f"made the HF folder from the GGUF in {time.perf_counter() - began:.1f}s", file=sys.stderr)
    return {"gguf": str(gguf), "hf": str(hf), "ollama": "ollama:smollm2:135m"}


def run(work: Path) -> list[dict[str, object]]:
    if all(("SmolLM2-135M", *t) in DONE for t in TARGETS):
        return [DONE[("SmolLM2-135M", *t)] for t in TARGETS]
    sources = make_sources(work)
    os.environ["OLLAMA_MODELS"] = str(work / "ollama")  # for resolve() here and the builds
    rows = [_measure(work, kind, sources[kind], provider, precision, label="SmolLM2-135M")
            for kind, provider, precision in TARGETS]
    return rows


def scale_rows(work: Path) -> list[dict[str, object]]:
    """The same measurement on a model 3.7× larger: random weights in Qwen2.5-0.5B's shape
    (494M parameters; no hub, so no real weights), from an HF folder and from a GGUF of it
    (F32, written as llama.cpp does: tests/prepare/tiny_models.py) — the estimate's slope."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    from tests.prepare.tiny_models import CHATML, Arch, train_tokenizer, write_gguf

    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=2, pad_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    raw = train_tokenizer()
    folder = work / "Random-Qwen2.5-0.5B-shape"
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", chat_template=CHATML).save_pretrained(folder)
    gguf = write_gguf(Arch("qwen2", lambda: config, CHATML, "<|endoftext|>", "<|im_end|>", gguf_arch="qwen2"),
                      model, raw, work / "random-qwen2.5-0.5b-shape.gguf")  # fmt: skip
    del model
    return [_measure(work, kind, ref, "cpu", "int4", label="Qwen2.5-0.5B shape (494M)")
            for kind, ref in (("hf", str(folder)), ("gguf", str(gguf)))]


RESULTS = ROOT / "bench" / "results" / "prepare_builds.json"
DONE: dict[tuple[str, ...], dict[str, object]] = {}  # with --resume: rows measured by an earlier run


def _measure(work: Path, kind: str, ref: str, provider: str, precision: str, label: str) -> dict[str, object]:
    if (label, kind, provider, precision) in DONE:
        return DONE[(label, kind, provider, precision)]
    home = work / f"home-{kind}-{provider}-{precision}-{label[:4]}"
    env = {**os.environ, "DRAGOMAN_HOME": str(home)}
    source = resolve(ref, home=home)
    need = estimate(source, precision)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dragoman.backends.onnx.prepare", ref, "--provider", provider, "--precision", precision,
                    "--print-path"], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - began
    (build,) = builds(home)
    record = build.record
    stages = {s.name: s.seconds for s in record.stages}
    row = {
        "model": label, "source": kind, "provider": provider, "precision": precision, "wall_s": round(wall, 1),
        "convert_s": stages.get("convert", 0.0), "build_s": stages.get("build", 0.0),
        "peak_rss_mib": round(record.peak_rss / MiB), "estimate_mib": round(need.memory / MiB),
        "rss_ratio": round(record.peak_rss / need.memory, 2),
        "size_mib": round(build.size / MiB, 1), "disk_estimate_mib": round(need.disk / MiB),
    }  # fmt: skip
    print(json.dumps(row), file=sys.stderr)
    shutil.rmtree(home, ignore_errors=True)
    DONE[(label, kind, provider, precision)] = row
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(list(DONE.values()), indent=1) + "\n")  # so --resume can pick up after a failure
    return row


def section(rows: list[dict[str, object]]) -> str:
    lines = [
        SECTION, "",
        "Measured by `.venv/bin/python bench/prepare_builds.py --write`: each build from scratch, one after another, "
        "on this project's shared 2-core machine (absolute times are noisy; the memory figures are not). "
        "SmolLM2-135M-Instruct (135M parameters, Q4_1 GGUF, 98 MB). *Peak RSS* is the build worker's high-water "
        "mark; *estimate* is what `prepare` checks against available memory before it starts.", "",
        "| model | source | target | wall | dequantize | builder | peak RSS | estimate | RSS / estimate | output | disk estimate |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['source']} | {r['provider']} {r['precision']} | {r['wall_s']} s | {r['convert_s'] or '–'} s | "
            f"{r['build_s']} s | {r['peak_rss_mib']} MiB | {r['estimate_mib']} MiB | {r['rss_ratio']} | "
            f"{r['size_mib']} MiB | {r['disk_estimate_mib']} MiB |"
        )
    lines += ["", "The HF source skips the dequantize stage (the builder reads the folder itself); the Ollama source "
              "is the GGUF blob, so it costs what the GGUF file costs. A GPU target (`dml`, `cuda`) is built on "
              "any OS: its cost here is the cost on the user's machine, before the GPU is involved.", "",
              "Memory grows by about 10 bytes per parameter for int4 (the builder holds the float32 model and "
              "the float32 initializers of the graph it quantizes: 10.5 B/parameter at 135M, 10.0 at 494M) and "
              "about 6 for fp16/fp32, on top of 0.41 GiB for the interpreter and libraries. So building a 1.5B "
              "model as int4 takes about 16 GiB, a 3B about 30 GiB and a 7B about 70 GiB — `prepare` says so and "
              "refuses before it starts when that much is not available; a model can be built on a larger "
              "machine (any OS, any provider) and its folder copied. These are the full-model path's figures (every "
              "build here ran before issue 26); a GGUF now builds streamed, in far less: "
              "[Streaming builds](#streaming-builds-issue-26).", ""]  # fmt: skip
    return "\n".join(lines)


SHAPES_SECTION = "## Streaming builds (issue 26)"
SHAPES_RESULTS = ROOT / "bench" / "results" / "prepare_shapes.json"


def _disk_used(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def _measure_shape(work: Path, gguf: Path, params: int, label: str, qtype: str, path: str) -> dict[str, object]:
    home = work / f"home-{label}-{qtype}-{path}"
    env = {**os.environ, "DRAGOMAN_HOME": str(home)}
    env.pop("DRAGOMAN_BUILD_PATH", None)
    if path == "full":
        env["DRAGOMAN_BUILD_PATH"] = "full"
    os.environ.pop("DRAGOMAN_BUILD_PATH", None)
    if path == "full":
        os.environ["DRAGOMAN_BUILD_PATH"] = "full"  # the estimate follows the path
    need = estimate(resolve(str(gguf), home=home), "int4")
    os.environ.pop("DRAGOMAN_BUILD_PATH", None)
    peak_disk = 0
    began = time.perf_counter()
    with subprocess.Popen([sys.executable, "-m", "dragoman.backends.onnx.prepare", str(gguf), "--precision", "int4",
                           "--print-path"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as child:  # fmt: skip
        while child.poll() is None:
            peak_disk = max(peak_disk, _disk_used(home / "models"))
            time.sleep(0.5)
        log = child.stderr.read().decode(errors="replace") if child.stderr else ""
    wall = time.perf_counter() - began
    if child.returncode != 0:
        raise SystemExit(f"the build of {gguf} failed:\n{log[-3000:]}")
    (build,) = builds(home)
    said = next((line for line in log.splitlines() if line.startswith("building with the")), "")
    row = {
        "model": label, "gguf": qtype, "path": path, "parameters_m": round(params / 1e6), "said": said,
        "gguf_mib": round(gguf.stat().st_size / MiB), "wall_s": round(wall, 1),
        "peak_rss_mib": round(build.record.peak_rss / MiB), "bytes_per_parameter": round(build.record.peak_rss / params, 2),
        "target_mib": round((1.5 * params + (1 << 30)) / MiB), "peak_disk_mib": round(peak_disk / MiB),
        "output_mib": round(build.size / MiB), "estimate_mib": round(need.memory / MiB),
        "rss_ratio": round(build.record.peak_rss / need.memory, 2), "disk_estimate_mib": round(need.disk / MiB),
    }  # fmt: skip
    print(json.dumps(row), file=sys.stderr, flush=True)
    shutil.rmtree(home, ignore_errors=True)
    return row


def shape_rows(work: Path, shapes: list[str], types: list[str]) -> list[dict[str, object]]:
    """One build at a time: a random GGUF written, built, measured and deleted."""
    import random_gguf

    rows: list[dict[str, object]] = []
    for number, name in enumerate(shapes):
        shape = random_gguf.SHAPES[name]
        params = random_gguf.parameters(shape)
        for kind, qtype in enumerate(types):
            gguf = random_gguf.write(shape, qtype, work / f"random-{name}-{qtype}.gguf")
            rows.append(_measure_shape(work, gguf, params, name, qtype, "streaming"))
            if number == 0 and kind == 0:
                rows.append(_measure_shape(work, gguf, params, name, qtype, "full"))
            gguf.unlink()
            SHAPES_RESULTS.parent.mkdir(exist_ok=True)
            SHAPES_RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def shapes_section(rows: list[dict[str, object]], cpu: str, command: str) -> str:
    lines = [
        SHAPES_SECTION, "",
        f"Measured by `{command}` on {cpu}, this project's shared 2-core machine (times are noisy, memory "
        "is not): random-weight GGUFs in each model's shape (bench/random_gguf.py), built as int4 for CPU one at "
        "a time. *Peak RSS* is the build worker's high-water mark, *target* issue 26's 1.5 bytes per parameter "
        "+ 1 GiB, *peak disk* the most the build's home held while it ran (scratch and output; the GGUF is "
        "elsewhere), *estimate* what `prepare` checks against available memory before it starts.", "",
        "| model | GGUF | path | wall | peak RSS | bytes/parameter | target | peak disk | output | estimate (RSS/estimate) | disk estimate |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['model']} ({r['parameters_m']}M) | {r['gguf']} ({r['gguf_mib']} MiB) | {r['path']} | {r['wall_s']} s | "
            f"{r['peak_rss_mib']} MiB | {r['bytes_per_parameter']} | {r['target_mib']} MiB | {r['peak_disk_mib']} MiB | "
            f"{r['output_mib']} MiB | {r['estimate_mib']} MiB ({r['rss_ratio']}) | {r['disk_estimate_mib']} MiB |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", help="comma-separated bench/random_gguf.py shapes: measure the streaming build on them")
    parser.add_argument("--types", default="Q8_0,Q4_0", help="GGUF types of --shapes (default Q8_0,Q4_0)")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--resume", action="store_true", help="keep the rows bench/results/prepare_builds.json has")
    parser.add_argument("--no-scale", action="store_true", help="skip the 494M-parameter random model (~5 GiB, minutes)")
    args = parser.parse_args()
    if args.shapes:
        import cpu_info

        cpu = cpu_info.this_cpu().describe()
        print(f"CPU: {cpu}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="prepare-shapes-") as tmp:
            rows = shape_rows(Path(tmp), args.shapes.split(","), args.types.split(","))
        text = shapes_section(rows, cpu, "python bench/prepare_builds.py " + " ".join(sys.argv[1:]))
        print(text)
        if args.write:
            write_section(ROOT / "docs" / "benchmarks.md", text, SHAPES_SECTION)
        return 0
    if args.resume and RESULTS.is_file():
        for row in json.loads(RESULTS.read_text()):
            DONE[(row["model"], row["source"], row["provider"], row["precision"])] = row
    with tempfile.TemporaryDirectory(prefix="prepare-bench-") as tmp:
        rows = run(Path(tmp))
        if not args.no_scale:
            rows += scale_rows(Path(tmp))
    text = section(rows)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", text, SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
