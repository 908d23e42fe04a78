"""What the worker runs a model on, and what the model folder says it needs.

A GPU provider, when one is a candidate and loads, gets the library's Generator; CPU
gets the batch engine (:mod:`backends.onnx.batch`) unless the model does not fit it
(then the Generator, said in the log).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec

from backends.onnx.batch import BatchEngine
from backends.onnx.decoder import Decoder, Unsupported, self_check
from backends.onnx.prefix_cache import PrefixCache
from backends.onnx.protocol import WorkerConfig
from backends.onnx.providers import ProviderError, load_model

log = logging.getLogger("dragoman.onnx.worker")


def load(config: WorkerConfig) -> tuple[Any, BatchEngine | None, str]:
    """(library model or None, batch engine or None, provider)."""
    path = Path(config.model_path)
    others = [p for p in config.providers if p != "cpu"]
    options = {"provider_options": config.provider_options, "threads": config.threads}
    if config.engine == "batch" and "cpu" not in config.providers:
        raise ProviderError(f"engine: batch runs on CPU only; the providers here are {', '.join(config.providers)}")
    if others and config.engine != "batch":
        try:
            model, provider = load_model(path, others, **options)  # type: ignore[arg-type]
            return model, None, provider
        except ProviderError:
            if "cpu" not in config.providers:
                raise
    if config.engine != "generator":
        try:
            decoder = Decoder(path, threads=config.threads, spin=config.spin)
            self_check(decoder)
            log.info("the batch engine's threads spin between ops: %s", decoder.spin_mode)
            cache = PrefixCache(config.prefix_cache_bytes, config.prefix_cache_entries)
            return None, BatchEngine(decoder, cache, decoder.layout.context_length), "cpu"
        except Unsupported as exc:
            if config.engine == "batch":
                raise
            log.warning("%s runs on the library's Generator (no batching, no prefix reuse): %s", path, exc)
    model, provider = load_model(path, ["cpu"], **options)  # type: ignore[arg-type]
    return model, None, provider


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
