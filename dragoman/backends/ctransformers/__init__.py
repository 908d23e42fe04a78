"""GGML-family models on CPU (and CUDA) through ctransformers 0.2.27.

The ``ctransformers`` library is imported only when a model loads, so this package,
its settings and its file checks work without the ``ctransformers`` extra.
"""

from __future__ import annotations

from dragoman.backends.ctransformers.backend import CTransformersBackend
from dragoman.backends.ctransformers.settings import CTransformersSettings

__all__ = ["CTransformersBackend", "CTransformersSettings"]
