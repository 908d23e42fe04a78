"""What a pull reports as it goes: shared by the pull seam (pull.py) and the builds it
runs (onnx/prepare/background.py) without either importing the other."""

from __future__ import annotations

from collections.abc import Callable

import msgspec


class PullProgress(msgspec.Struct, omit_defaults=True, frozen=True):
    """One NDJSON line of ``/api/pull``, as Ollama's ``api.ProgressResponse``."""

    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


ProgressCallback = Callable[[PullProgress], None]
