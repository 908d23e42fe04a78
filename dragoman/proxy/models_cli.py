"""``dragoman models rm`` and ``dragoman models cp``: Ollama's delete and copy for the
models dragoman built (:mod:`dragoman.backends.onnx.built_models`), checked against a
config file's entries."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragoman.config import Config


def add_commands(models: Any, load: Callable[[Path | None], Config]) -> None:
    """The two commands on the ``models`` subparsers; ``load`` reads a config (None: the built-in)."""
    rm = models.add_parser("rm", help="delete a built model (one of its names; the folder when none is left)")
    rm.add_argument("model", metavar="NAME", help="a name the build answers to, or its folder name")
    rm.add_argument("--config", type=Path, help="the config whose entries must not serve it (default: the built-in one)")
    rm.add_argument("--remove-entry", action="store_true",
                    help="also remove the entry naming it from --config, when --add-to wrote that entry")  # fmt: skip
    rm.set_defaults(run=lambda args: run_rm(args, load))
    cp = models.add_parser("cp", help="record another name for a built model")
    cp.add_argument("source", metavar="SOURCE")
    cp.add_argument("destination", metavar="DESTINATION")
    cp.set_defaults(run=run_cp)


def run_rm(args: argparse.Namespace, load: Callable[[Path | None], Config]) -> int:
    from dragoman.backends.onnx import built_models
    from dragoman.backends.onnx.prepare.entry import without_entry
    from dragoman.backends.onnx.prepare.support import PrepareError, write_atomically
    from dragoman.backends.registry import settings_type
    from dragoman.config import ConfigError, parse_config

    config = load(args.config)
    updated: str | None = None
    try:
        if args.remove_entry:
            if args.config is None:
                raise PrepareError("--remove-entry needs --config FILE: the file --add-to wrote the entry into")
            updated = without_entry(args.config, args.model)
            try:
                config = parse_config(updated, str(args.config), settings_type)
            except ConfigError as exc:  # without_entry checked it already
                raise PrepareError(str(exc)) from None
            built_models.check_delete(args.model, config)  # nothing changes when the model still cannot go
            write_atomically(args.config, updated)
            print(f"removed the entry '{args.model}' from {args.config}", file=sys.stderr)
        done = built_models.delete(args.model, config)
    except (built_models.NoSuchModel, built_models.Refused, PrepareError) as exc:
        print(f"dragoman: {exc.args[0]}", file=sys.stderr)
        return 1
    print("\n".join(done))
    return 0


def run_cp(args: argparse.Namespace) -> int:
    from dragoman.backends.onnx import built_models

    try:
        done = built_models.copy(args.source, args.destination)
    except (built_models.NoSuchModel, built_models.Refused) as exc:
        print(f"dragoman: {exc.args[0]}", file=sys.stderr)
        return 1
    print("\n".join(done))
    return 0
