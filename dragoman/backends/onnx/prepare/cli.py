"""``dragoman models prepare`` (also ``python -m dragoman.backends.onnx.prepare``) and the built
models' half of ``dragoman models list``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dragoman.backends.onnx.prepare.architectures import PRECISIONS
from dragoman.backends.onnx.prepare.support import PrepareError, Progress, human_bytes
from dragoman.config.paths import models_dir

SOURCE_HELP = (
    "a GGUF file, a Hugging Face model folder, ollama:NAME[:TAG] (from the local Ollama store: "
    "$OLLAMA_MODELS or ~/.ollama/models), or a known name (smollm2; the embedding models all-minilm, smollm2-hidden)"
)


def add_prepare_arguments(parser: argparse.ArgumentParser, *, source: bool = True) -> None:
    if source:
        parser.add_argument("source", metavar="SOURCE", help=SOURCE_HELP)
    parser.add_argument("--name", help="the name clients ask for (default: the Ollama name, or the model's own)")
    parser.add_argument("--provider", choices=list(PRECISIONS), default="cpu",
                        help="the execution provider the graph is built for (default cpu)")  # fmt: skip
    parser.add_argument("--precision", choices=["int4", "fp16", "fp32"], default="int4",
                        help="int4 (default; cpu/cuda/dml), fp16 (cuda/dml), fp32 (cpu/cuda)")  # fmt: skip
    parser.add_argument("--template", type=Path, metavar="FILE.jinja",
                        help="a Jinja chat template to use instead of the model's")  # fmt: skip
    parser.add_argument("--add-to", type=Path, metavar="CONFIG", help="add the entry to this config file")
    parser.add_argument("--force", action="store_true", help="rebuild even when an intact build exists")
    parser.add_argument("--verbose", action="store_true", help="show the builder's own output")
    parser.add_argument("--progress-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--print-path", action="store_true", help=argparse.SUPPRESS)


def add_pull_arguments(parser: argparse.ArgumentParser) -> None:
    from dragoman.backends.onnx.prepare.registry import DEFAULT_REGISTRY

    parser.add_argument("model", metavar="NAME", help="an Ollama name, [host/][namespace/]model[:tag] (llama3.2:1b), or from Hugging Face "
                        "(HF_ENDPOINT) hf:ORG/REPO (its onnxruntime-genai folder for --provider) or hf:ORG/REPO/FILE.gguf")
    parser.add_argument("--registry", default=DEFAULT_REGISTRY, metavar="URL",
                        help=f"the Ollama registry to pull from (default {DEFAULT_REGISTRY}; a config's server.registry)")  # fmt: skip
    add_prepare_arguments(parser, source=False)


def run_pull(args: argparse.Namespace) -> int:
    """``dragoman models pull NAME``: the manifest and blobs from the registry into
    DRAGOMAN_HOME/ollama (resuming what an earlier pull left), then ``prepare ollama:NAME``."""
    import asyncio

    from dragoman.backends.onnx.prepare import registry

    if args.model.startswith("hf:"):  # from Hugging Face instead
        return _run_hf_pull(args)
    from dragoman.backends.pull_progress import PullProgress

    def show(step: PullProgress) -> None:
        if args.progress_json:
            return
        done = f" {human_bytes(step.completed)} of {human_bytes(step.total)}" if step.total and step.completed is not None else ""
        print(f"{step.status}{done}", file=sys.stderr)

    print("pulling manifest", file=sys.stderr)
    try:
        name = asyncio.run(registry.pull(args.model.removeprefix("ollama:"), registry=args.registry, report=show))
    except PrepareError as exc:
        print(f"dragoman: {exc}", file=sys.stderr)
        return 1
    args.source = f"ollama:{name.display}"
    return run_prepare(args)


def _run_hf_pull(args: argparse.Namespace) -> int:
    """``dragoman models pull hf:…``: the download with a progress line per step, then
    (for a GGUF) ``prepare``'s build, and the entry to serve it."""
    from dragoman.backends.onnx.prepare import hf_pull
    from dragoman.backends.onnx.prepare.catalogue import add_name
    from dragoman.backends.onnx.prepare.entry import add_to_config, yaml_entry
    from dragoman.backends.onnx.prepare.hf_names import parse
    from dragoman.backends.pull_progress import PullProgress

    def show(step: PullProgress) -> None:
        done = f" {human_bytes(step.completed)} of {human_bytes(step.total)}" if step.total and step.completed is not None else ""
        print(f"{step.status}{done}", file=sys.stderr)

    try:
        name = parse(args.model)
        if name.is_gguf:
            path, _ = hf_pull.pull_gguf(name, show)
            args.source, args.name = str(path), args.name or name.display
            return run_prepare(args)
        build = hf_pull.pull_folder(name, args.provider, show)
        served = args.name or name.display
        if args.name:
            build = add_name(build, args.name)
        if args.add_to:
            add_to_config(args.add_to, build, served)
    except PrepareError as exc:
        print(f"dragoman: {exc}", file=sys.stderr)
        return 1
    where = f"added to {args.add_to}" if args.add_to else "add it to the models: list of your config"
    print(f"# {build.id} ({source_label(build)}); {where}:\n{yaml_entry(build, served)}", end="")
    return 0


EMBEDDING_MODELS = ("all-minilm", "smollm2-hidden")  # built by dragoman/backends/onnx/embeddings/build.py


def run_prepare(args: argparse.Namespace) -> int:
    from dragoman.backends.onnx.prepare.build import prepare
    from dragoman.backends.onnx.prepare.entry import add_to_config, yaml_entry

    if args.source in EMBEDDING_MODELS and not Path(args.source).exists():
        return _prepare_embedding(args)
    bar = Progress(4, json_lines=args.progress_json)
    try:
        build = prepare(args.source, name=args.name, provider=args.provider, precision=args.precision,
                        progress=bar, force=args.force, template_file=args.template, verbose=args.verbose)  # fmt: skip
        name = args.name or build.record.name
        if args.add_to:
            add_to_config(args.add_to, build, name)
    except PrepareError as exc:
        if args.progress_json:
            bar.error(str(exc))
        print(f"dragoman: {exc}", file=sys.stderr)
        return 1
    if args.print_path:
        print(build.path)
        return 0
    entry = yaml_entry(build, name)
    where = f"added to {args.add_to}" if args.add_to else "add it to the models: list of your config"
    print(f"# {build.record.model or build.id} ({source_label(build)}); {where}:\n{entry}", end="")
    return 0


def _prepare_embedding(args: argparse.Namespace) -> int:
    from dragoman.backends.onnx.embeddings.build import prepare as prepare_embedding

    try:
        print(prepare_embedding(args.source, args.provider))
    except PrepareError as exc:
        print(f"dragoman: {exc}", file=sys.stderr)
        return 1
    return 0


def source_label(build: object) -> str:
    source = build.record.source  # type: ignore[attr-defined]
    return source if isinstance(source, str) else f"{source.kind}:{source.ref}"


def print_builds(home: Path | None = None) -> None:
    """The built models: folder, names, source, provider, precision, size."""
    from dragoman.backends.onnx.prepare.catalogue import builds

    found = builds(home)
    print(f"\nbuilt in {models_dir(home)}: {len(found) or 'none'}")
    if not found:
        return
    rows = [("BUILD", "NAMES", "SOURCE", "PROVIDER", "PRECISION", "SIZE")]
    for build in found:
        record = build.record
        source = source_label(build)
        names = ",".join(dict.fromkeys(n for n in (record.name, *record.names) if n))
        rows.append((build.id, names or "-", source or "?", record.provider or "?",
                     record.precision or record.quantization_level or "?", human_bytes(build.size)))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def main(argv: list[str]) -> int:
    """``python -m dragoman.backends.onnx.prepare [cpu|cuda|dml]`` (the default model, printing
    its folder) or ``python -m dragoman.backends.onnx.prepare SOURCE [options]``."""
    if not argv or (len(argv) == 1 and argv[0] in PRECISIONS):
        from dragoman.backends.onnx.prepare.build import prepare_smollm2

        try:
            print(prepare_smollm2(argv[0] if argv else "cpu"))  # type: ignore[arg-type]
        except PrepareError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    parser = argparse.ArgumentParser(prog="python -m dragoman.backends.onnx.prepare")
    add_prepare_arguments(parser)
    return run_prepare(parser.parse_args(argv))
