"""What a pull of an ``hf:`` name does (:mod:`.hf_pull`) in a server — ``/api/pull`` of
a name the config does not serve, or of an entry whose ``model:`` is that name — and on
the command line (``dragoman models pull hf:…``, in :mod:`.cli`): an onnxruntime-genai folder is the
build; a GGUF is then built as ``prepare`` builds one, under the ``hf:`` name.

In a server the download runs in a thread (``huggingface_hub`` is synchronous), its
progress carried back to the event loop in Ollama's pull shape, and two pulls of one
name share one download, as two pulls of one source share one build.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from dragoman.backends.onnx.prepare import build_queue, hf_pull
from dragoman.backends.onnx.prepare.catalogue import Build
from dragoman.backends.onnx.prepare.hf_names import parse
from dragoman.backends.onnx.prepare.support import PrepareError
from dragoman.backends.pull_progress import PullProgress

_downloads: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, build_queue.BuildQueue[Any, PullProgress]] = (
    weakref.WeakKeyDictionary()
)


def _in_thread(key: Any, label: str, work: Callable[[hf_pull.Report], Any], report: hf_pull.Report) -> Awaitable[Any]:
    loop = asyncio.get_running_loop()
    downloads = _downloads.get(loop) or _downloads.setdefault(loop, build_queue.BuildQueue())

    def start(emit: Callable[[PullProgress], None]) -> Awaitable[Any]:
        def say(step: PullProgress) -> None:  # from the download's thread
            loop.call_soon_threadsafe(emit, step)

        return asyncio.to_thread(work, say)

    return downloads.run(key, label, start, report, status=lambda text: PullProgress(status=text), is_stage=lambda _: False)


async def pull(text: str, *, provider: str, report: hf_pull.Report) -> Build:
    """``text`` pulled (and, for a GGUF, built) for ``provider``; a :class:`PrepareError` says why not."""
    from dragoman.backends.onnx.prepare.background import prepare_in_background, pull_progress

    name = parse(text)
    if not name.is_gguf:
        build: Build = await _in_thread(("hf", name, provider), name.display,
                                        lambda say: hf_pull.pull_folder(name, provider, say), report)  # fmt: skip
        return build
    path, file = await _in_thread(("hf", name), name.display, lambda say: hf_pull.pull_gguf(name, say), report)
    return await prepare_in_background(str(path), name=name.display, provider=provider,
                                       on_progress=pull_progress(report, file.digest))  # fmt: skip


def default_provider() -> str:
    """The provider a pull of a name no entry serves is for: the installed flavour's."""
    from dragoman.backends.onnx.providers import candidate_providers, installed_flavours

    return candidate_providers("auto", installed_flavours())[0]


def pull_build(text: str) -> Callable[[Callable[[Any], None]], Any]:
    """``/api/pull`` of ``text``, which the config does not serve; the name is checked
    here, before any request (a :class:`PrepareError`)."""
    name = parse(text)

    async def run(progress: Callable[[Any], None]) -> None:
        from dragoman.adapters.errors import BackendError
        from dragoman.backends.onnx.prepare.entry import yaml_entry

        try:
            built = await pull(text, provider=default_provider(), report=progress)
        except PrepareError as exc:
            raise BackendError(f"pull of '{name.display}' failed: {exc}") from None
        entry = " ".join(line.strip() for line in yaml_entry(built, name.display).splitlines() if line.strip())
        progress(PullProgress(status=f"pulled {built.id}; to serve it, add to the config's models: {entry}"))

    return run


__all__ = ["default_provider", "pull", "pull_build"]
