"""Finding a ctransformers model's file and creating its library instances.

The library is imported here, when a model loads, never at package import, so the
package (and ``dragoman config check``) works without the ``ctransformers`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dragoman.adapters.errors import BackendError
from dragoman.backends.ctransformers.formats import (
    ALTERNATIVES,
    SUPPORTED_FORMATS,
    ModelFile,
    UnsupportedModelFile,
    inspect_model_file,
)
from dragoman.backends.ctransformers.settings import CTransformersSettings

INSTALL_HINT = "pip install 'dragoman[ctransformers]'"
# A GGUF's training context can be far more than a CPU model wants preallocated;
# the library's own default (512) is far less. Override with context_length.
DEFAULT_MAX_CONTEXT = 4096


def inspect(name: str, settings: CTransformersSettings) -> ModelFile:
    """The model file the entry ``name`` names, or an error saying what is wrong with it."""
    path = Path(settings.path).expanduser()
    try:
        return inspect_model_file(path, settings.model_type)
    except FileNotFoundError:
        raise BackendError(f"model '{name}': the model file {path} does not exist") from None
    except (UnsupportedModelFile, OSError) as exc:
        raise BackendError(f"model '{name}': {exc}") from None


def create_instances(name: str, settings: CTransformersSettings, file: ModelFile, context: int | None) -> list[Any]:
    """``max_concurrent`` library instances of ``file`` (each holds its own context)."""
    try:
        from ctransformers.llm import LLM, Config
    except ImportError as exc:
        raise BackendError(f"model '{name}' needs the ctransformers library ({exc}): {INSTALL_HINT}") from exc
    config = Config(
        context_length=context or -1,
        gpu_layers=settings.gpu_layers,
        threads=settings.threads or -1,
        batch_size=settings.batch_size,
    )
    try:
        return [LLM(file.path, file.model_type, config=config, lib=settings.lib) for _ in range(settings.max_concurrent)]
    except OSError as exc:  # the shared library itself (CUDA runtime missing, …)
        raise BackendError(f"model '{name}': cannot load the ctransformers library: {exc}") from exc
    except (RuntimeError, ValueError) as exc:
        raise BackendError(f"model '{name}': {exc} {SUPPORTED_FORMATS}; {ALTERNATIVES}.") from exc


def wanted_context(configured: int | None, file: ModelFile) -> int | None:
    """The context to ask the library for: the entry's, else a GGUF's own up to
    :data:`DEFAULT_MAX_CONTEXT`, else (``None``) a GGML-era file's own."""
    if configured:
        return configured
    if file.container == "gguf" and file.context_length:
        return min(file.context_length, DEFAULT_MAX_CONTEXT)
    return None


def parameter_size(parameters: int) -> str:
    """Ollama's way of writing a parameter count: ``1.7B``, ``135M``."""
    if not parameters:
        return ""
    if parameters >= 1e9:
        return f"{parameters / 1e9:.1f}B"
    return f"{round(parameters / 1e6)}M"
