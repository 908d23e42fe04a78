"""The ``dragoman`` command: serve, check a config, list and prepare models."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from dragoman.backends.onnx.prepare.cli import add_prepare_arguments, add_pull_arguments, print_builds, run_prepare, run_pull
from dragoman.backends.registry import settings_type
from dragoman.config import Config, ConfigError, check_report, load_config, routing_table
from dragoman.proxy import models_cli, workers
from dragoman.proxy.graceful_server import GracefulServer
from dragoman.proxy.gc_settings import tune_for_serving
from dragoman.proxy.host_check import bound_to, startup_warnings
from dragoman.proxy.logging import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except ConfigError as exc:
        print(f"dragoman: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dragoman", description="A local chat-API gateway (OpenAI and Ollama dialects).")
    commands = parser.add_subparsers(title="commands")

    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument("--config", type=Path, help="YAML config (default: the built-in one serving smollm2:135m)")
    serve.add_argument("--host", help="address to bind (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default from config: 11434)")
    serve.add_argument("--workers", type=int, help="server processes (default from config: auto)")
    serve.set_defaults(run=_serve)

    config = commands.add_parser("config", help="work with config files").add_subparsers(title="config commands")
    check = config.add_parser("check", help="validate a config file and print its routing table")
    check.add_argument("file", type=Path)
    check.set_defaults(run=_config_check)

    models = commands.add_parser("models", help="list or prepare models").add_subparsers(title="models commands")
    listing = models.add_parser("list", help="list the models a config serves, and the models built locally")
    listing.add_argument("--config", type=Path)
    listing.set_defaults(run=_models_list)
    prepare = models.add_parser(
        "prepare", help="build a local model from a GGUF, a Hugging Face folder, the Ollama store or a known name "
                        "(needs the 'prepare' extra)",
    )  # fmt: skip
    add_prepare_arguments(prepare)
    prepare.set_defaults(run=run_prepare)
    pull = models.add_parser("pull", help="download a model from an Ollama registry by name, then prepare it")
    add_pull_arguments(pull)
    pull.set_defaults(run=run_pull)
    models_cli.add_commands(models, _load)
    return parser


def _load(path: Path | None) -> Config:
    return load_config(path, settings_type)


def _serve(args: argparse.Namespace) -> int:
    from dragoman.proxy.app import create_app

    config = _load(args.config)
    configure_logging(config.server.log_format, config.server.log_level)
    problems = _preflight(config)
    if problems:
        print("dragoman: cannot start:\n" + "\n".join(f"  {p}" for p in problems), file=sys.stderr)
        return 2
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port  # 0: the kernel's choice
    if args.workers is not None and args.workers < 1:
        print("dragoman: --workers must be at least 1", file=sys.stderr)
        return 2
    if not 0 <= port <= 65535:
        print(f"dragoman: --port must be a port number, 0 to 65535 (0: any free port); not {port}", file=sys.stderr)
        return 2
    if args.config is None and not _ensure_default_model():
        return 1
    count = args.workers or workers.process_count(config)
    # Bound here when the start-up line cannot know the port otherwise (port 0) or
    # the workers need it: that line says where the server is.
    sockets = workers.bind_sockets(host, port, count) if count > 1 or port == 0 else []
    if sockets:
        port = sockets[0].getsockname()[1]
    config = bound_to(config, host)
    address = workers.url_host(host)
    print(f"dragoman: serving {len(config.models)} model entr{'y' if len(config.models) == 1 else 'ies'} "
          f"from {config.source} on http://{address}:{port}"
          + (f" with {count} worker processes" if count > 1 else ""), file=sys.stderr)  # fmt: skip
    if config.server.ui:
        print(f"dragoman: web page at http://{address}:{port}/ui", file=sys.stderr)
    if note := workers.startup_note(config, count):
        print(f"dragoman: note: {note}", file=sys.stderr)
    for warning in startup_warnings(config):
        print(f"dragoman: warning: {warning}", file=sys.stderr)
    if count > 1:
        return workers.serve_processes(config, args.config, sockets)
    app = create_app(config)
    tune_for_serving()
    server = GracefulServer(
        uvicorn.Config(
            app, host=host, port=port, log_config=None, access_log=False,
            # uvicorn's own cut-off comes after ours, which ends streams with an error event
            timeout_graceful_shutdown=math.ceil(config.server.shutdown_grace + 5),
        )
    )
    server.run(sockets=sockets or None)
    return 0


def _preflight(config: Config) -> list[str]:
    """Problems backends can see before serving (a backend class may offer
    ``preflight(settings) -> str | None``)."""
    from dragoman.backends.base import Preflight
    from dragoman.backends.registry import backend_class

    problems: list[str] = []
    for route in config.models:
        cls = backend_class(route.config.backend)
        problem = cls.preflight(route.settings) if isinstance(cls, Preflight) else None
        if problem:
            problems.append(f"model '{route.config.name}': {problem}")
    return problems


def _ensure_default_model() -> bool:
    """The built-in config serves a model built locally; build it on first run (with
    progress) when the build tools are installed, otherwise say exactly what to run."""
    from dragoman.backends.onnx.prepare import PrepareError, default_model_path, is_prepared, prepare_smollm2

    if is_prepared(default_model_path("cpu")):
        return True
    print("dragoman: the default model smollm2:135m is not built yet; building it now (once)", file=sys.stderr)
    try:
        prepare_smollm2("cpu")
    except PrepareError as exc:
        print(f"dragoman: {exc}\n  then build it with: dragoman models prepare smollm2", file=sys.stderr)
        return False
    return True


def _config_check(args: argparse.Namespace) -> int:
    print("\n".join(check_report(_load(args.file))))
    return 0


def _models_list(args: argparse.Namespace) -> int:
    config = _load(args.config)
    for name, backend, how in routing_table(config):
        print(f"{name}\t{backend}\t{how}")
    print_builds()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
