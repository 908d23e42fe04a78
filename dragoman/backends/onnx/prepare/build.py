"""Building an ONNX Runtime GenAI model from a source (:mod:`.sources`) for one
provider and precision, into ``<DRAGOMAN_HOME>/models/<stem>-<precision>-<provider>``.

- Checked before any work: the source (architecture, tensor types, template), the
  provider/precision pair, the build tools, and the estimated disk and peak memory
  against what is free — a refusal names the figures.
- Idempotent by content: the build key hashes the source's content (the GGUF's sha256
  — an Ollama blob's name, checked against its bytes — or the HF folder's file hashes), the
  template, the options and the tool versions. An intact build with the same key is
  reused, wherever it is and whatever it was called (a second name is recorded on it);
  a changed source or option is a new build, replacing the folder of the same name.
- Atomic: the build happens in a hidden folder beside the target and is renamed into
  place when complete, with a marker listing every file's size and hash.
- One at a time per home (:mod:`.build_lock`), taken after the reuse check.
- The heavy work runs in :mod:`.worker`, a child process whose peak RSS is recorded
  (:mod:`.worker_process`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import time
from pathlib import Path

import msgspec

from dragoman.backends.onnx.prepare import catalogue
from dragoman.backends.onnx.prepare.architectures import FULL_MODEL_GGUF, BuildProvider, check_target
from dragoman.backends.onnx.prepare.build_lock import build_lock
from dragoman.backends.onnx.prepare.catalogue import Build, BuildRecord, SourceInfo, StageRecord
from dragoman.backends.onnx.prepare.pinned_gguf import GGUF_SHA256
from dragoman.backends.onnx.prepare.sources import Source, resolve, sha256_text, slug
from dragoman.backends.onnx.prepare.support import (
    GiB, MiB, PrepareError, Progress, check_resources, human_bytes, install_dir,
    temporary_dir,
)  # fmt: skip
from dragoman.backends.onnx.prepare.worker_process import WorkerSpec, run_worker
from dragoman.config.paths import dragoman_home, models_dir

MODEL_STEM = "smollm2-135m-instruct-int4"
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
# Bump when what the worker writes changes for the same inputs (so old builds rebuild).
RECIPE = "2"


def default_model_path(provider: BuildProvider = "cpu", home: Path | None = None) -> Path:
    """Where :func:`prepare_smollm2` puts the model built for ``provider``."""
    return models_dir(home) / f"{MODEL_STEM}-{provider}"


def missing_build_tools() -> list[str]:
    """Distribution names of the build tools that are not installed."""
    return [dist for module, dist in BUILD_TOOLS.items() if importlib.util.find_spec(module) is None]


# -- estimates -------------------------------------------------------------------------------


class Estimate(msgspec.Struct, frozen=True):
    disk: int  # bytes needed at the peak of the build (scratch + output)
    memory: int  # bytes of peak RSS
    output: int  # bytes of the finished model


BYTES_PER_PARAMETER = {"int4": 0.75, "fp16": 2.0, "fp32": 4.0}  # output files; int4 keeps embeddings wider
# The full-model path, fitted on bench/prepare_builds.py (docs/benchmarks.md, "Model
# builds"): a tiny model's build peaks at 0.41 GiB (the interpreter with torch,
# transformers and the builder), SmolLM2's (135M parameters) at 1.71 GiB for int4 on CPU
# (10.5 bytes per parameter: the builder holds the float32 model and its graph's float32
# initializers while it quantizes), 1.17 GiB for fp32 and 1.13 GiB for fp16 (6.1 and 5.8
# bytes per parameter); 494M parameters int4: 5.2 GiB (10.0 bytes per parameter, 11.4 in
# the issue 26 run). A margin of 5-25% on top, so the check refuses only builds that
# would not fit.
MEMORY_PER_PARAMETER = {"int4": 11.5, "fp16": 7.0, "fp32": 7.0}
MEMORY_BASE = int(0.45 * GiB)
# The streaming int4 build (docs/benchmarks.md, "Streaming builds"): the interpreter and
# tokenizer, the int4 model it keeps until it writes it (0.64 bytes per parameter), and one
# part's float32 weights with their quantization at a time — the largest part is the
# embedding or LM head, a vocabulary × hidden matrix (4 bytes per element, 1.25× while it is
# quantized). Random Qwen2.5-0.5B shape: 1.32 GiB measured. A 15% margin on top.
STREAMING_BASE = int(0.45 * GiB)
STREAMING_PER_PARAMETER = 0.65
STREAMING_PER_LARGEST_ELEMENT = 5.0
STREAMING_MARGIN = 1.15


def estimate(source: Source, precision: str) -> Estimate:
    params = max(source.parameters, 1)
    output = int(params * BYTES_PER_PARAMETER[precision])
    streamed = not full_model_reason(source)
    if streamed and precision == "int4":
        memory = STREAMING_MARGIN * (STREAMING_BASE + params * STREAMING_PER_PARAMETER
                                     + source.largest_tensor * STREAMING_PER_LARGEST_ELEMENT)  # fmt: skip
    else:
        # fp16/fp32 keep every float32 weight until they are written, streamed or not
        memory = params * MEMORY_PER_PARAMETER[precision] + MEMORY_BASE
    scratch = params * 4 if source.is_gguf and not streamed else 0  # the dequantized float32 folder
    return Estimate(disk=scratch + output + 64 * MiB, memory=int(memory), output=output)


# -- the build -----------------------------------------------------------------------------------


def build_key(source: Source, provider: str, precision: str) -> str:
    return sha256_text(json.dumps({
        "recipe": RECIPE,
        "source": source.content_sha256,
        "template": sha256_text(source.template) if source.template else source.template_origin,
        "extra_eos": sorted(source.extra_eos),
        "provider": provider,
        "precision": precision,
        "builder": tool_version("onnxruntime-genai"),
        "transformers": tool_version("transformers") if source.is_gguf else "",
    }, sort_keys=True))  # fmt: skip


def prepare(
    ref: str | Source,
    *,
    name: str | None = None,
    provider: str = "cpu",
    precision: str = "int4",
    home: Path | None = None,
    progress: bool | Progress = True,
    force: bool = False,
    template_file: Path | None = None,
    verbose: bool = False,
    reuse_anywhere: bool = True,
) -> Build:
    """Build ``ref`` (a SOURCE string or a resolved :class:`Source`) unless an intact
    build with the same key exists (anywhere in the catalogue, or with
    ``reuse_anywhere`` false only at its own folder); returns it from the catalogue."""
    problem = check_target(provider, precision)
    if problem:
        raise PrepareError(problem)
    bar = progress if isinstance(progress, Progress) else Progress(4, enabled=progress)
    if not isinstance(ref, Source):
        bar.note(f"reading {ref}…")
    source = ref if isinstance(ref, Source) else resolve(ref, home=home, template_file=template_file, on_verify=bar.verify)
    bar.stages = 4 if source.is_gguf else 3
    served = name or source.default_name
    key = build_key(source, provider, precision)
    stem = slug(name) if name and source.kind != "known" else source.stem
    # A known name has its own folder, which configs name: only a build there counts.
    anywhere = reuse_anywhere and source.kind != "known"
    if not force and (built := _reusable(key, target_folder(models_dir(home), stem, precision, provider, served),
                                         served, anywhere, home)) is not None:  # fmt: skip
        return built
    with build_lock(home or dragoman_home(), source.ref, bar.note):
        target = target_folder(models_dir(home), stem, precision, provider, served)
        # The build that held the lock may have been this very one.
        if not force and (built := _reusable(key, target, served, anywhere, home)) is not None:
            return built
        return _build(source, key, target, served, provider, precision, bar, verbose=verbose)


def _reusable(key: str, target: Path, served: str, anywhere: bool, home: Path | None) -> Build | None:
    existing = catalogue.with_key(key, home)
    if existing is not None and (anywhere or existing.path == target):
        return catalogue.add_name(existing, served)
    return None


def _build(
    source: Source, key: str, target: Path, served: str, provider: str, precision: str, bar: Progress, *, verbose: bool
) -> Build:
    missing = missing_build_tools()
    if missing:
        raise PrepareError(f"building a model needs {', '.join(missing)}; install them with: {INSTALL_HINT}")
    need = estimate(source, precision)
    reason = full_model_reason(source)
    how = "streamed from the GGUF a layer at a time" if not reason else f"through a float32 copy of the whole model: {reason}"
    refusals = check_resources(disk_needed=need.disk, disk_at=target.parent, memory_needed=need.memory,
                               what=f"building {source.model} ({source.parameter_size} parameters) as {precision} ({how})")  # fmt: skip
    if refusals:
        raise PrepareError("; and ".join(refusals))
    bar.stage(1, f"{source.model}: {source.family}, {source.parameter_size} parameters, {source.quantization or 'float'}; "
                 f"needs ~{human_bytes(need.memory)} memory, ~{human_bytes(need.disk)} disk")  # fmt: skip
    started = time.perf_counter()
    for note in source.notes:
        bar.note(f"note: {note}")
    with temporary_dir(target.parent, prefix=f".{target.name}.") as work:
        out = work / "onnx"
        stages = _run_worker(source, work, out, provider, precision, bar, verbose=verbose)
        bar.stage(bar.stages, f"recording file hashes and installing into {target}")
        record = BuildRecord(
            name=served,
            model=source.model,
            source=SourceInfo(kind=source.kind, ref=source.ref, path=str(source.path), sha256=source.content_sha256),
            key=key,
            architecture=source.architecture,
            family=source.family,
            parameter_size=source.parameter_size,
            quantization_level=precision,
            precision=precision,
            provider=provider,
            builder=f"onnxruntime-genai {tool_version('onnxruntime-genai')}",
            template=source.template_origin,
            context_length=source.context_length,
            defaults=source.defaults,
            system=source.system,
            stages=stages,
            seconds=round(time.perf_counter() - started, 1),
            peak_rss=max((s.peak_rss for s in stages), default=0),
        )
        catalogue.write_record(out, record)
        install_dir(out, target, replace=True, is_intact=catalogue.is_prepared)
    build = Build(target.name, target, catalogue.read_record(target) or record)
    bar.note(f"model ready in {build.record.seconds:.1f}s (peak RSS {human_bytes(build.record.peak_rss)}, "
             f"{human_bytes(build.size)} on disk): {target}")  # fmt: skip
    return build


def target_folder(root: Path, stem: str, precision: str, provider: str, served: str) -> Path:
    """``<stem>-<precision>-<provider>``; a folder of that name holding another model
    (served under another name) is left alone and ``-2``, ``-3``… is used instead. One
    holding this name is replaced: its source or options changed."""
    base = f"{stem}-{precision}-{provider}"
    for number in range(1, 1000):
        folder = root / (base if number == 1 else f"{base}-{number}")
        record = catalogue.read_record(folder)
        if record is None or not catalogue.is_prepared(folder) or record.name == served:
            return folder
    raise PrepareError(f"more than 999 builds named {base} in {root}")


# Set to "full" to build a GGUF through the float32 folder even where the streaming
# build could (the benchmark and the tests that compare the two paths).
PATH_VARIABLE = "DRAGOMAN_BUILD_PATH"


def full_model_reason(source: Source) -> str:
    """Why ``source`` is built through a float32 Hugging Face folder holding the whole
    model; empty when the streaming build (one layer in memory at a time) takes it."""
    if not source.is_gguf:
        return "the source is a Hugging Face folder, which the builder loads whole"
    if source.family in FULL_MODEL_GGUF:
        return FULL_MODEL_GGUF[source.family]
    if os.environ.get(PATH_VARIABLE) == "full":
        return f"{PATH_VARIABLE}=full"
    return ""


def _run_worker(
    source: Source, work: Path, out: Path, provider: str, precision: str, bar: Progress, *, verbose: bool
) -> list[StageRecord]:
    reason = full_model_reason(source)
    if reason:
        bar.note(f"building with the full-model path because {reason}")
    else:
        bar.note("building with the streaming path (the GGUF is read one layer at a time)")
    spec = WorkerSpec(
        hf_dir=str(work / "hf" if source.is_gguf else source.path),
        gguf=str(source.path) if source.is_gguf else None,
        out=str(out),
        cache=str(work / "cache"),
        precision=precision,
        provider=provider,
        template=source.template,
        extra_eos=source.extra_eos,
        stream=source.is_gguf and not reason,
    )
    return run_worker(spec, work / "spec.json", bar, verbose=verbose)


def tool_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


# -- the default model -----------------------------------------------------------------------------


def prepare_smollm2(
    provider: BuildProvider = "cpu",
    home: Path | None = None,
    progress: bool = True,
    *,
    force: bool = False,
) -> Path:
    """Build SmolLM2-135M-Instruct int4 for ``provider`` unless an intact build exists;
    returns the model folder. Raises :class:`PrepareError` with the command to run
    when tools miss."""
    problem = check_target(provider, "int4")
    if problem:
        raise PrepareError(problem)
    target = default_model_path(provider, home)
    record = catalogue.read_record(target)
    # Intact, built by this recipe (it has a key) from the known GGUF: no need to find
    # and hash the GGUF again.
    source = record.source if record is not None else None
    if (not force and record is not None and record.key and isinstance(source, SourceInfo)
            and source.sha256 == GGUF_SHA256 and catalogue.is_prepared(target)):  # fmt: skip
        return target
    missing = missing_build_tools()
    if missing:
        raise PrepareError(f"building the default model needs {', '.join(missing)}; install them with: {INSTALL_HINT}")
    # The default config names this folder: a known name builds there even when the
    # same GGUF was already built under another name.
    return prepare("smollm2", provider=provider, precision="int4", home=home, progress=progress, force=force).path
