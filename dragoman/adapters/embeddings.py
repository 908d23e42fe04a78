"""What every dialect promises about vectors, applied once whatever backend made them.

Pure numpy over a float32 array of shape (inputs, dimensions): ``dimensions`` keeps
the first components (Matryoshka truncation, as OpenAI's ``text-embedding-3`` and
Ollama's ``dimensions`` do) and L2 normalisation follows when the dialect promises
unit vectors. Ollama normalises, truncates, then normalises again
(``server/routes.go`` ``EmbedHandler``); normalising after the cut gives the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dragoman.adapters.errors import BackendError, RequestError

# Below this a vector is treated as zero rather than blown up (Ollama's 1e-12 guard).
_TINY = 1e-12


def as_matrix(vectors: Any) -> np.ndarray:
    """``vectors`` (arrays or lists of floats) as a C-contiguous float32 matrix."""
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.ndim == 1 and matrix.size == 0:
        return matrix.reshape(0, 0)
    if matrix.ndim != 2:
        raise BackendError(f"the backend returned vectors of shape {matrix.shape}, not (inputs, dimensions)")
    return matrix


def shape_vectors(vectors: Any, *, dimensions: int | None, normalize: bool) -> np.ndarray:
    """Truncate to ``dimensions`` and normalise as asked. Refuses a ``dimensions``
    beyond the model's own and vectors holding NaN or infinity (a broken model must
    not hand clients garbage that sorts as similar)."""
    matrix = as_matrix(vectors)
    if matrix.size == 0:
        return matrix
    native = matrix.shape[1]
    if dimensions is not None:
        if dimensions > native:
            raise RequestError(
                f"dimensions: {dimensions} is more than the model's {native} dimensions", param="dimensions"
            )
        matrix = matrix[:, :dimensions]
    if not np.isfinite(matrix).all():
        raise BackendError("the model produced an embedding with NaN or infinite values")
    if normalize:
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.maximum(norms, _TINY)
    return np.ascontiguousarray(matrix, dtype=np.float32)


__all__ = ["as_matrix", "shape_vectors"]
