"""Which execution provider a model runs on.

Every flavour of the wheel installs the same module ``onnxruntime_genai``; two at once
overwrite each other's files, so that is refused. :func:`candidate_providers` is the
pure decision (table-tested); :func:`installed_flavours` and :func:`load_model` probe
the machine: ``auto`` really loads the model with each candidate in turn, because the
library's ``is_cuda_available()`` only reports how the wheel was built.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from dragoman.adapters.errors import BackendError

Provider = Literal["cpu", "cuda", "dml"]
ProviderChoice = Literal["cpu", "cuda", "dml", "auto"]

# Distribution → the accelerated provider it brings (every flavour also runs on CPU).
FLAVOURS: dict[str, Provider] = {
    "onnxruntime-genai": "cpu",
    "onnxruntime-genai-cuda": "cuda",
    "onnxruntime-genai-winml": "dml",
    "onnxruntime-genai-directml": "dml",
}
EXTRAS: dict[Provider, str] = {"cpu": "dragoman[cpu]", "cuda": "dragoman[cuda]", "dml": "dragoman[directml]"}
MIN_VERSION = (0, 18)

log = logging.getLogger(__name__)


class ProviderError(BackendError):
    """The installed wheels cannot give the provider asked for."""


def installed_flavours() -> dict[str, str]:
    """Installed flavour distributions → their versions."""
    found = {}
    for dist in FLAVOURS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def candidate_providers(requested: ProviderChoice, installed: Mapping[str, str]) -> list[Provider]:
    """Providers to try, in order, for ``requested`` given the installed flavours
    (distribution → version). Raises :class:`ProviderError` saying what to run."""
    if not installed:
        raise ProviderError("onnxruntime-genai is not installed: pip install 'dragoman[cpu]' (or [cuda], [directml])")
    if len(installed) > 1:
        keep = _preferred_flavour(requested, installed)
        drop = sorted(d for d in installed if d != keep)
        raise ProviderError(
            f"several onnxruntime-genai flavours are installed ({', '.join(sorted(installed))}) and overwrite "
            f"each other's files; keep one: pip uninstall -y {' '.join(drop)} && pip install --force-reinstall {keep}"
        )
    (dist, version), = installed.items()  # fmt: skip
    if _version_tuple(version) < MIN_VERSION:
        raise ProviderError(
            f"{dist} {version} is too old (needs >= {'.'.join(map(str, MIN_VERSION))}); "
            f"pip uninstall -y {dist} && pip install '{EXTRAS[FLAVOURS[dist]]}'"
        )
    accelerated = FLAVOURS[dist]
    if requested == "auto":
        return [accelerated, "cpu"] if accelerated != "cpu" else ["cpu"]
    if requested == "cpu" or requested == accelerated:
        return [requested]
    return _missing_flavour(requested, dist)


def _missing_flavour(requested: Provider, dist: str) -> list[Provider]:
    wanted = [d for d, p in FLAVOURS.items() if p == requested and d != "onnxruntime-genai-directml"]
    raise ProviderError(
        f"provider '{requested}' needs {' or '.join(wanted)}, but {dist} is installed: "
        f"pip uninstall -y {dist} && pip install '{EXTRAS[requested]}'"
    )


def _preferred_flavour(requested: ProviderChoice, installed: Mapping[str, str]) -> str:
    order = [d for d in FLAVOURS if FLAVOURS[d] == requested] + list(FLAVOURS)[1:] + ["onnxruntime-genai"]
    return next(d for d in order if d in installed)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def load_model(
    path: Path,
    candidates: list[Provider],
    *,
    provider_options: Mapping[str, str] | None = None,
    threads: int | None = None,
) -> tuple[Any, Provider]:
    """Load ``path`` with the first candidate that works → (``og.Model``, provider).
    Imports ``onnxruntime_genai``; runs in the worker process."""
    import onnxruntime_genai as og

    errors = []
    for provider in candidates:
        config = og.Config(str(path))
        config.clear_providers()
        if provider != "cpu":
            config.append_provider(provider)
            for key, value in (provider_options or {}).items():
                config.set_provider_option(provider, key, str(value))
        config.overlay(_session_overlay(threads))
        try:
            model = og.Model(config)
        except RuntimeError as exc:
            errors.append(f"{provider}: {exc}")
            log.warning("could not load %s on %s: %s", path, provider, exc)
            continue
        if len(candidates) > 1:
            log.warning("provider auto: chose %s (device %s) for %s", provider, model.device_type, path)
        return model, provider
    raise ProviderError(f"could not load {path} with any of {', '.join(candidates)}: {'; '.join(errors)}")


def _session_overlay(threads: int | None) -> str:
    """Decoder session options. Spinning is off: by default the intra-op pool takes
    every core, and threads spinning between token steps starve the gateway process
    that must forward each token (single-stream decode over HTTP against a raw loop,
    2 cores: 0.93x -> 1.08x on a busy machine, 1.05x -> 1.07x on a quiet one; TTFT and
    aggregate throughput unchanged; see docs/benchmarks.md)."""
    import json

    options: dict[str, int | str] = {"session.intra_op.allow_spinning": "0"}
    if threads:
        options["intra_op_num_threads"] = threads
    return json.dumps({"model": {"decoder": {"session_options": options}}})


def flavour_problem(requested: ProviderChoice) -> str | None:
    """Checked before the server starts (chat and embedding entries alike): a missing or
    doubled onnxruntime-genai flavour is a problem to fix now, not at the first request."""
    try:
        candidate_providers(requested, installed_flavours())
    except ProviderError as exc:
        return str(exc)
    return None
