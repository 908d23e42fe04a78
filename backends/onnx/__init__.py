"""Local models through ONNX Runtime GenAI, one worker process per loaded model.

``onnxruntime_genai`` is imported only in the worker, the model builder and the
provider probe, never at package import time.
"""

from __future__ import annotations

from backends.onnx.backend import OnnxBackend

__all__ = ["OnnxBackend"]
