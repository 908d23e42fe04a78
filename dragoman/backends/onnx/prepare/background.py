"""Builds started from a running server, without blocking its event loop and without
importing torch into it: ``python -m dragoman.backends.onnx.prepare … --progress-json`` in a
child process, its progress read line by line.

- :func:`prepare_in_subprocess` — the default model on first use (the onnx backend);
- :func:`prepare_in_background` — any SOURCE, reporting each progress event (the hook
  ``/api/pull`` calls to build an ``ollama:`` or known name with Ollama's pull shape:
  :func:`pull_source` says what a pulled name builds from).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from dragoman.backends.onnx.prepare import build_queue
from dragoman.backends.onnx.prepare.catalogue import Build, is_prepared, read_record
from dragoman.backends.onnx.prepare.support import PrepareError
from dragoman.config.paths import dragoman_home

log = logging.getLogger("dragoman.onnx.prepare")
ROOT = str(Path(__file__).resolve().parents[4])
LOG_TAIL = 40  # lines of a crashed build's output kept for the server log


class BuildProgress(msgspec.Struct, frozen=True):
    """One progress event: what is happening, and how far (when countable)."""

    status: str
    completed: int | None = None
    total: int | None = None
    stage: int | None = None
    stages: int | None = None
    digest: str | None = None  # what is being verified (``verifying sha256:…``)


async def prepare_in_background(
    source: str,
    *,
    name: str | None = None,
    provider: str = "cpu",
    precision: str = "int4",
    home: Path | None = None,
    on_progress: Callable[[BuildProgress], Any] | None = None,
) -> Build:
    """Build ``source`` (anything ``dragoman models prepare`` takes) in a child process;
    ``on_progress`` gets every stage and bar update. One build per source and one at
    a time (:mod:`.build_queue`): a call for a build under way follows it. Raises
    :class:`PrepareError` with the child's reason."""
    from dragoman.backends.onnx.prepare.architectures import check_target

    problem = check_target(provider, precision)
    if problem:  # before a process starts
        if on_progress is not None:
            on_progress(BuildProgress(status=f"error: {problem}"))
        raise PrepareError(problem)
    key = (source, name, provider, precision, str(home or dragoman_home()))
    return await build_queue.queue().run(
        key, source, lambda emit: _build_in_child(source, name, provider, precision, home, emit), on_progress,
        status=lambda text: BuildProgress(status=text), is_stage=lambda event: event.stage is not None and event.completed is None,
    )  # fmt: skip


async def _build_in_child(
    source: str, name: str | None, provider: str, precision: str, home: Path | None, on_progress: Callable[[BuildProgress], Any]
) -> Build:
    args = [source, "--provider", provider, "--precision", precision, "--progress-json", "--print-path"]
    if name:
        args += ["--name", name]
    env = {**os.environ, **({"DRAGOMAN_HOME": str(home)} if home else {})}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dragoman.backends.onnx.prepare", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env, limit=1 << 20,
    )  # fmt: skip
    log.info("build of %s started (pid %d)", source, process.pid)
    assert process.stderr is not None and process.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    errors: list[str] = []
    while line := await process.stderr.readline():
        text = line.decode(errors="replace").rstrip()
        event = _event(text)
        if event is None and not text.startswith("dragoman: "):
            tail.append(text[:2000])
        if event is not None:
            log.info("%s", event.status)
            if event.status.startswith("error: "):
                errors.append(event.status.removeprefix("error: "))
            on_progress(event)
        elif text.startswith("dragoman: "):
            errors.append(text.removeprefix("dragoman: "))
    out = (await process.stdout.read()).decode(errors="replace").strip().splitlines()
    code = await process.wait()
    log.info("build of %s ended (pid %d, exit status %d)", source, process.pid, code)
    if code != 0 or not out:
        if tail:  # a crash's traceback: for the server log, not for whoever asked
            log.error("the build of %s failed (exit status %d); its last output:\n%s", source, code, "\n".join(tail))
        if errors:  # the build's own reason, said for people (a PrepareError)
            raise PrepareError(errors[-1])
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        raise PrepareError(f"the build of {source} stopped with an internal error ({how}); the server log has its "
                           f"output, and `dragoman models prepare {source}` shows it too — please report it")  # fmt: skip
    folder = Path(out[-1])
    record = read_record(folder)
    if record is None or not is_prepared(folder):
        raise PrepareError(f"the build reported {folder}, which holds no intact build")
    return Build(folder.name, folder, record)


def pull_source(name: str) -> str | None:
    """The SOURCE ``prepare`` builds for a pull of ``name``: ``ollama:NAME[:TAG]`` when
    the local Ollama store has it, or a known name; None when nothing here can be built
    for it (a plain name is never looked up in the Ollama store: a pull that builds
    gigabytes must be asked for by name). Only a stat of the manifest — cheap in a request handler."""
    from dragoman.backends.onnx.prepare import ollama_store
    from dragoman.backends.onnx.prepare.sources import known

    if known(name) is not None:
        return name
    if not name.startswith("ollama:"):
        return None
    try:
        parsed = ollama_store.parse_name(name.removeprefix("ollama:"))
    except PrepareError:
        return None
    return name if ollama_store.has_model(parsed, ollama_store.find_store(parsed)) else None


def pull_progress(progress: Callable[[Any], None] | None, digest: str | None) -> Callable[[BuildProgress], None] | None:
    """Build progress as ``/api/pull`` lines (``backends.pull.PullProgress``): each stage
    as ``completed`` of ``total`` stages on ``digest`` (the source's sha256), notes as
    status lines, the last line all stages completed. Bars within a stage are left out:
    Ollama's ``completed``/``total`` count one unit per digest."""
    if progress is None:
        return None
    from dragoman.backends.pull_progress import PullProgress

    stages = {"total": 0}

    def report(event: BuildProgress) -> None:
        if event.stage is not None and event.stages is not None:
            if event.completed is None:  # a stage begins
                stages["total"] = event.stages
                progress(PullProgress(status=event.status, digest=digest, total=event.stages, completed=event.stage - 1))
        elif event.digest is not None:  # hashing the source: bytes, as Ollama counts a download
            progress(PullProgress(status=event.status, digest=event.digest, total=event.total, completed=event.completed))
        elif event.status.startswith("model ready") and stages["total"]:
            progress(PullProgress(status=event.status, digest=digest, total=stages["total"], completed=stages["total"]))
        else:
            progress(PullProgress(status=event.status))

    return report


def pull_build(name: str) -> Callable[[Callable[[Any], None]], Any] | None:
    """What ``/api/pull`` runs for ``name`` when the config does not serve it (see
    :func:`backends.pull.buildable`): the build, with progress, then a line saying
    which config entry serves it. None when nothing can be built for ``name``."""
    source = pull_source(name)
    fetch = None
    if source is None:
        fetch = registry_name(name)
        if fetch is None:
            return None
        source = f"ollama:{fetch}"

    async def build(progress: Callable[[Any], None]) -> None:
        from dragoman.adapters.errors import BackendError
        from dragoman.backends.onnx.prepare import registry
        from dragoman.backends.onnx.prepare.entry import yaml_entry
        from dragoman.backends.pull_progress import PullProgress

        try:
            if fetch is not None:
                await registry.pull(fetch, registry=registry.address(), report=progress)
            digest = await asyncio.to_thread(_digest, source)  # the manifest is a file read: off the event loop
            built = await prepare_in_background(source, on_progress=pull_progress(progress, digest))
        except PrepareError as exc:
            raise BackendError(f"pull of '{name}' failed: {exc}") from None
        entry = " ".join(line.strip() for line in yaml_entry(built, built.record.name).splitlines() if line.strip())
        progress(PullProgress(status=f"built {built.id}; to serve it, add to the config's models: {entry}"))

    return build


def registry_name(name: str) -> str | None:
    """The name to pull from the registry (:mod:`.registry`) for a pull of ``name`` that
    nothing here can build: a well-formed Ollama name, with or without ``ollama:``; None
    when registry pulls are off (``server.registry: ""``) or the name is not one."""
    from dragoman.backends.onnx.prepare import ollama_store, registry

    if not registry.address():
        return None
    bare = name.removeprefix("ollama:")
    try:
        ollama_store.parse_name(bare)
    except PrepareError:
        return None
    return bare


def _digest(source: str) -> str | None:
    """The sha256 of what a pull of ``source`` reads (the GGUF), when known cheaply."""
    from dragoman.backends.onnx.prepare import ollama_store
    from dragoman.backends.onnx.prepare.build import GGUF_SHA256

    if source.startswith("ollama:"):
        try:
            name = ollama_store.parse_name(source.removeprefix("ollama:"))
            return ollama_store.model_layer(ollama_store.read_manifest(name, ollama_store.find_store(name)), name).digest
        except PrepareError:
            return None
    return f"sha256:{GGUF_SHA256}"


def _event(line: str) -> BuildProgress | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if "note" in data:
        return BuildProgress(status=str(data["note"]))
    if "error" in data:
        return BuildProgress(status=f"error: {data['error']}")
    if "verify" in data:
        digest = str(data["verify"])
        return BuildProgress(status=f"verifying {digest}", completed=data.get("completed"), total=data.get("total"), digest=digest)
    if "status" in data:
        return BuildProgress(
            status=str(data["status"]), completed=data.get("completed"), total=data.get("total"),
            stage=data.get("stage"), stages=data.get("stages"),
        )  # fmt: skip
    return None


async def prepare_in_subprocess(
    provider: str, target: Path, on_progress: Callable[[BuildProgress], Any] | None = None
) -> Path:
    """Build the default model from a server (first use, or a pull); progress is
    logged and, with ``on_progress``, reported."""
    log.warning("building the default model into %s (first use; takes a minute)", target)
    home = target.parent.parent
    try:
        build = await prepare_in_background("smollm2", provider=provider, home=home, on_progress=on_progress)
    except PrepareError as exc:
        raise PrepareError(f"building the default model failed: {exc}") from exc
    if build.path != target or not is_prepared(target):
        raise PrepareError(f"building the default model failed: it is at {build.path}, not {target}")
    return target


async def build_in_subprocess(
    module_args: list[str], target: Path, what: str, on_line: Callable[[str], None] | None = None
) -> Path:
    """``python -m <module_args>`` as a child process (the embedding models' builds),
    its stage lines logged (and given to ``on_line``); the build must leave an intact
    marker at ``target``. In the same line as the chat models' builds (:mod:`.build_queue`)."""
    return await build_queue.queue().run(
        ("module", *module_args, str(target)), what, lambda emit: _module_in_child(module_args, target, what, emit), on_line,
        status=lambda text: text, is_stage=lambda line: line.startswith("["),
    )  # fmt: skip


async def _module_in_child(module_args: list[str], target: Path, what: str, on_line: Callable[[str], None]) -> Path:
    log.warning("building %s into %s (first use; takes a minute)", what, target)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", *module_args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        limit=1 << 20,
    )  # fmt: skip
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    errors: list[str] = []
    assert process.stderr is not None
    while line := await process.stderr.readline():
        text = line.decode(errors="replace").rstrip()
        if text.startswith("error:"):
            errors.append(text.removeprefix("error:").strip())
        elif text.startswith("[") or "model ready" in text:
            log.info("%s", text)
            on_line(text)
        else:
            tail.append(text[:2000])
    code = await process.wait()
    if code != 0 or not is_prepared(target):
        if tail:  # a crash's traceback: for the server log, not for whoever asked
            log.error("building %s failed (exit status %d); its last output:\n%s", what, code, "\n".join(tail))
        reason = errors[-1] if errors else f"an internal error (exit status {code}); the server log has its output"
        raise PrepareError(f"building {what} failed: {reason}")
    return target
