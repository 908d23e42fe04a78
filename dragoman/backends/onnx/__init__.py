"""Local models through ONNX Runtime GenAI, one worker process per loaded model.

``onnxruntime_genai`` is imported only in the worker, the model builder and the
provider probe, never at package import time. ``OnnxBackend`` itself is resolved on
first access, so ``python -m dragoman.backends.onnx.prepare`` and ``-m dragoman.backends.onnx.worker.process``
start without importing the server side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dragoman.backends.onnx.backend import OnnxBackend

__all__ = ["OnnxBackend"]


def __getattr__(name: str) -> Any:
    if name == "OnnxBackend":
        from dragoman.backends.onnx.backend import OnnxBackend

        return OnnxBackend
    raise AttributeError(f"module 'dragoman.backends.onnx' has no attribute {name!r}")
