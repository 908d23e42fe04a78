"""Building ONNX Runtime GenAI models that dragoman serves: ``dragoman models prepare
SOURCE`` for a GGUF file, a Hugging Face folder, ``ollama:NAME[:TAG]`` from the local
Ollama store, or a known short name (``smollm2``, the default model).

- :mod:`.sources` — what SOURCE is, checked up front (headers only)
- :mod:`.ollama_store` — Ollama's manifests and blobs, as Ollama writes them
- :mod:`.store_files` — reading a store's files safely (regular, inside, bounded)
- :mod:`.go_templates` — what happens to a Go chat template
- :mod:`.architectures` — what can be built, for which provider and precision
- :mod:`.build` — the build: key, checks, stages, atomic install
- :mod:`.worker` — the heavy half (transformers, the builder), in a child process
- :mod:`.catalogue` — the built models and their markers
- :mod:`.entry` — the YAML entry printed or added to a config
- :mod:`.background` — builds started from the server (first use, ``/api/pull``)
- :mod:`.build_queue` — one build per source and one at a time in a server
- :mod:`.build_lock` — one build at a time per home, across processes
- :mod:`.support` — build folders, hashes, progress, disk/memory checks (reusable)

Importing this package imports no torch, transformers or onnxruntime-genai.
"""

from __future__ import annotations

from dragoman.backends.onnx.prepare.architectures import BuildProvider
from dragoman.backends.onnx.prepare.background import prepare_in_subprocess
from dragoman.backends.onnx.prepare.build import default_model_path, missing_build_tools, prepare, prepare_smollm2
from dragoman.backends.onnx.prepare.pinned_gguf import GGUF_SHA256, find_gguf
from dragoman.backends.onnx.prepare.catalogue import MARKER, is_prepared
from dragoman.backends.onnx.prepare.support import PrepareError

__all__ = [
    "GGUF_SHA256", "MARKER", "BuildProvider", "PrepareError", "default_model_path", "find_gguf", "is_prepared",
    "missing_build_tools", "prepare", "prepare_in_subprocess", "prepare_smollm2",
]  # fmt: skip
