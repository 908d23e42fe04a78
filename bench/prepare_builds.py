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
              "machine (any OS, any provider) and its folder copied.", ""]  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--resume", action="store_true", help="keep the rows bench/results/prepare_builds.json has")
    parser.add_argument("--no-scale", action="store_true", help="skip the 494M-parameter random model (~5 GiB, minutes)")
    args = parser.parse_args()
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
