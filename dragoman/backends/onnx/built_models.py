"""Ollama's delete and copy, for the models dragoman built (``/api/delete``, ``/api/copy``,
``dragoman models rm``, ``dragoman models cp``).

A build (a folder of the catalogue, :mod:`.prepare.catalogue`) answers to its folder name
and to the names it was prepared, pulled or copied under. As in Ollama, a copy records
one more name, and a delete removes one name: the folder goes when no name is left, or
when the folder's own name is the one deleted. Either is refused, naming the entry, while
a config entry serves what would go (its ``model:`` resolves to the build, or its
``path:`` is the folder): the server would answer that entry with a missing model, or
one loaded from files being deleted. A folder goes by a rename to a hidden name first,
so nothing half-deleted is ever taken for a build.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import msgspec

from dragoman.backends.onnx.model_files import ModelFiles
from dragoman.backends.onnx.prepare import catalogue
from dragoman.backends.onnx.prepare.catalogue import Build
from dragoman.backends.onnx.settings import OnnxSettings
from dragoman.config import Config

MAX_NAME = 256


class NoSuchModel(LookupError):
    """No build answers to the name."""


class Refused(Exception):
    """The change would take away what a config entry serves, or clash with another
    build (``conflict``); or ``field`` names an unusable name (not ``conflict``)."""

    def __init__(self, message: str, *, field: str = "model", conflict: bool = True) -> None:
        super().__init__(message)
        self.message, self.field, self.conflict = message, field, conflict


def named(name: str, home: Path | None = None) -> list[Build]:
    """The builds ``name`` means: the folder of that name, else every build answering to it
    (one per provider it was built for)."""
    every = catalogue.builds(home)
    exact = [b for b in every if b.id == name]
    return exact or [b for b in every if b.answers_to(name)]


def serving_entries(build: Build, config: Config) -> list[tuple[str, str]]:
    """The config's onnx entries whose model is ``build``: (entry name, the ``model:`` it
    names, or "" when it names the folder by ``path:`` or is the default model)."""
    found = []
    for route in config.models:
        settings = route.settings
        if route.config.backend != "onnx" or not isinstance(settings, OnnxSettings):
            continue
        folder = ModelFiles(route.config.name, settings, None).folder()
        if _same(folder, build.path):
            found.append((route.config.name, settings.model if settings.model is not None and settings.path is None else ""))
    return found


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _names(build: Build) -> list[str]:
    return list(dict.fromkeys(n for n in (build.record.name, *build.record.names) if n))


Plan = list[tuple[Build, list[str], bool]]  # each build, the names it keeps, whether its folder goes


def check_delete(name: str, config: Config, home: Path | None = None) -> Plan:
    """What deleting ``name`` would do; raises :class:`NoSuchModel`, or :class:`Refused`
    when a config entry serves what would go or a worker has it loaded."""
    targets = named(name, home)
    if not targets:
        raise NoSuchModel(_not_found(name, home))
    plan = []
    for build in targets:
        rest = [n for n in _names(build) if n != name]
        whole = build.id == name or not rest
        serving = [(entry, model) for entry, model in serving_entries(build, config) if whole or model == name]
        if serving:
            raise Refused(_served(name, build, serving))
        pid = loaded_by_a_worker(build) if whole else None
        if pid is not None:
            raise Refused(f"'{name}' is {build.id}, which a model worker (pid {pid}) of a server on this machine has "
                          "loaded; unload it (a request with keep_alive 0) or stop that server first")  # fmt: skip
        plan.append((build, rest, whole))
    return plan


def delete(name: str, config: Config, home: Path | None = None) -> list[str]:
    """Delete ``name``: the name from each build answering to it, and each folder left
    with no name (or named by its folder name). Returns what was done, a line each.
    Raises as :func:`check_delete` does, having changed nothing."""
    done = []
    for build, rest, whole in check_delete(name, config, home):
        if whole:
            remove_folder(build.path)
            done.append(f"deleted {build.id}")
        else:
            record = msgspec.structs.replace(build.record, name=rest[0], names=rest[1:])
            catalogue.write_record(build.path, record, hash_files=False)
            done.append(f"removed the name '{name}' from {build.id} (it still answers to {', '.join(rest)})")
    return done


def copy(source: str, destination: str, home: Path | None = None) -> list[str]:
    """Record ``destination`` as another name of each build ``source`` means. Refused
    when ``destination`` already names another build for the same provider (a config
    entry naming it would change model without a word)."""
    problem = name_problem(destination)
    if problem:
        raise Refused(f"destination: {problem}", field="destination", conflict=False)
    targets = named(source, home)
    if not targets:
        raise NoSuchModel(_not_found(source, home))
    others = [b for b in catalogue.builds(home) if b not in targets and b.answers_to(destination)]
    for build in targets:
        clash = [b for b in others if b.record.provider == build.record.provider or b.id == destination]
        if clash:
            raise Refused(f"destination: '{destination}' already names {clash[0].id} ({clash[0].record.provider}); "
                          f"delete that name first (dragoman models rm {destination}) or choose another",
                          field="destination")  # fmt: skip
    return [f"{catalogue.add_name(build, destination).id} also answers to '{destination}'" for build in targets]


def name_problem(name: str) -> str | None:
    if not name:
        return "the name is empty"
    if len(name) > MAX_NAME:
        return f"the name is {len(name)} characters long; the limit is {MAX_NAME}"
    if any(c.isspace() or not c.isprintable() for c in name):
        return "a model name has no spaces or control characters"
    return None


def remove_folder(path: Path) -> None:
    """Renamed to a hidden name in the same folder (which the catalogue skips), then removed."""
    hidden = path.with_name(f".deleting-{path.name}-{os.getpid()}")
    os.replace(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def loaded_by_a_worker(build: Build) -> int | None:
    """The pid of a model worker of any server on this machine that has ``build`` loaded
    (read from /proc: Linux; elsewhere None, and a file in use cannot be deleted anyway)."""
    if not sys.platform.startswith("linux"):
        return None
    needles = {str(build.path).encode(), str(build.path.resolve()).encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dragoman.backends.onnx.worker.process" in command and any(n in part for part in command for n in needles):
            return int(entry.name)
    return None


def _served(name: str, build: Build, serving: list[tuple[str, str]]) -> str:
    entries = ", ".join(f"'{entry}'" for entry, _ in serving)
    one = len(serving) == 1
    return (f"'{name}' is {build.id}, which the config entr{'y' if one else 'ies'} {entries} still serve{'s' if one else ''}; "
            "remove the entry first (dragoman models rm NAME --config FILE --remove-entry does both when --add-to "
            "wrote it), then delete the model")  # fmt: skip


def _not_found(name: str, home: Path | None) -> str:
    """Not the folder's path: whoever asks over the API need not learn the server's folders."""
    built = ", ".join(b.id for b in catalogue.builds(home)) or "none"
    return f"model '{name}' not found (built: {built})"


__all__ = ["NoSuchModel", "Refused", "check_delete", "copy", "delete", "loaded_by_a_worker", "named", "serving_entries"]
