"""What the worker runs a model on, and what the model folder says it needs.

A GPU provider, when one is a candidate and loads, gets the library's Generator; CPU
gets the batch engine (:mod:`backends.onnx.worker.batch_engine`) unless the model does not fit it
(then the Generator). Whenever the Generator runs a model, the reason goes with the
Ready message, and the server says it wherever it says the engine.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from dragoman.backends.onnx.worker.batch_engine import BatchEngine
from dragoman.backends.onnx.worker.decoder import Decoder, Unsupported, self_check
from dragoman.backends.onnx.worker.prefix_cache import PrefixCache
from dragoman.backends.onnx.worker_protocol import WorkerConfig
from dragoman.backends.onnx.providers import ProviderError, load_model

log = logging.getLogger("dragoman.onnx.worker")
CONFIGURED = "engine: generator in the config"


class Loaded(NamedTuple):
    """What :func:`load` gives the worker: the library's model (the Generator's, None
    for the batch engine), the batch engine (None for the Generator), the provider,
    and why the Generator runs the model ("" for the batch engine)."""

    model: Any
    engine: BatchEngine | None
    provider: str
    engine_reason: str = ""


def load(config: WorkerConfig) -> Loaded:
    path = Path(config.model_path)
    others = [p for p in config.providers if p != "cpu"]
    options = {"provider_options": config.provider_options, "threads": config.threads}
    if config.engine == "batch" and "cpu" not in config.providers:
        raise ProviderError(f"engine: batch runs on CPU only; the providers here are {', '.join(config.providers)}")
    if others and config.engine != "batch":
        try:
            model, provider = load_model(path, others, **options)  # type: ignore[arg-type]
            reason = CONFIGURED if config.engine == "generator" else f"provider {provider}: the batch engine runs on CPU only"
            return Loaded(model, None, provider, reason)
        except ProviderError:
            if "cpu" not in config.providers:
                raise
    reason = CONFIGURED
    if config.engine != "generator":
        try:
            decoder = Decoder(path, threads=config.threads, spin=config.spin)
            self_check(decoder)
            log.info("the batch engine's threads spin between ops: %s", decoder.spin_mode)
            cache = PrefixCache(config.prefix_cache_bytes, config.prefix_cache_entries)
            return Loaded(None, BatchEngine(decoder, cache, decoder.layout.context_length), "cpu")
        except Unsupported as exc:
            if config.engine == "batch":
                raise
            reason = f"the batch engine refused the model: {exc}"
            log.warning("%s runs on the library's Generator (no batching; prefix reuse only between requests with the same sampling options): %s", path, reason)
    model, provider = load_model(path, ["cpu"], **options)  # type: ignore[arg-type]
    return Loaded(model, None, provider, reason)


def model_context_length(model_dir: Path) -> int | None:
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        return int(config["model"]["context_length"])
    except (OSError, KeyError, TypeError, ValueError, msgspec.DecodeError):
        return None


def sliding_window(model_dir: Path) -> int:
    """The attention window of sliding-window layers (Gemma 2/3), 0 when none: the KV
    cache must be at least this long even for a short request."""
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        return int((config["model"]["decoder"].get("sliding_window") or {}).get("window_size") or 0)
    except (OSError, KeyError, TypeError, ValueError, AttributeError, msgspec.DecodeError):
        return 0
