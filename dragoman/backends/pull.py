"""What ``/api/pull`` can do for a name, with progress in Ollama's pull shape.

dragoman serves the models its config file names. A pull of a served name makes that
model ready — a local model that is not built yet is built (from a known source, the
local Ollama store, or downloaded from the registry first) — and a name the config does
not serve is built when it can be, else an error naming what to do. The two hooks:

- a backend's ``pull(model, progress)`` (optional, see :class:`Pullable`): make a
  served model ready, calling ``progress`` as it goes;
- :func:`buildable`: what could be built for a name the config does *not* serve:
  ``ollama:NAME[:TAG]`` from the local Ollama store and the known names, else any Ollama
  name from ``server.registry`` (:mod:`backends.onnx.prepare.registry`), built as
  ``dragoman models prepare`` builds them, and ``hf:`` names from Hugging Face
  (:mod:`backends.onnx.prepare.hf_build`); anything else is a 404.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from dragoman.backends.pull_progress import ProgressCallback, PullProgress


@runtime_checkable
class Pullable(Protocol):
    async def pull(self, model: str, progress: ProgressCallback) -> None:
        """Make ``model`` ready to serve (build it when it can be built), reporting
        progress; raise a ``DragomanError`` saying what to do when it cannot."""
        ...


Build = Callable[[ProgressCallback], Awaitable[None]]


def buildable(name: str) -> Build | None:
    """A build for ``name``, which the config does not serve: ``ollama:NAME[:TAG]`` from
    the local Ollama store, or a known name (``dragoman models prepare``'s sources that a
    name alone identifies), or an ``hf:`` name pulled from Hugging Face (a bad one raises
    ``PrepareError`` before any request); None when nothing can be built for it."""
    from dragoman.backends.onnx.prepare import hf_build, hf_names
    from dragoman.backends.onnx.prepare.background import pull_build

    return hf_build.pull_build(name) if hf_names.is_hf(name) else pull_build(name)


def configure_registry(address: str) -> str:
    """Where a pull of a name not on this machine downloads from (``server.registry``;
    empty: nowhere); the address it replaces."""
    from dragoman.backends.onnx.prepare import registry

    previous = registry.address()
    registry.configure(address)
    return previous


_STAGE = re.compile(r"\[(\d+)/(\d+)\]\s*(?:\[[#.]*\]\s*)?(.*?)…?\s*$")


def stage_progress(line: str, digest: str) -> PullProgress | None:
    """A builder's stage line (``[2/4] [##..] building int4 ONNX model…``) as pull
    progress on ``digest``: ``completed`` counts the stages already done."""
    match = _STAGE.match(line.strip())
    if match is None:
        return None
    number, total, text = int(match.group(1)), int(match.group(2)), match.group(3)
    return PullProgress(status=text, digest=digest, total=total, completed=number - 1)


__all__ = ["Build", "configure_registry", "ProgressCallback", "PullProgress", "Pullable", "buildable", "stage_progress"]
