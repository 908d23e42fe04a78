"""The models dragoman built: each is a folder under ``<DRAGOMAN_HOME>/models`` with a
marker file (:data:`MARKER`) saying what it was built from, for which provider and
precision, how long the build took, and every output file's size and hash.

The folders themselves are the catalogue (no index to fall out of step): ``models
list`` and a config entry's ``model: NAME`` read the markers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from dragoman.backends.onnx.prepare.support import sha256_file, write_atomically
from dragoman.config.paths import models_dir

MARKER = "dragoman-model.json"


class SourceInfo(msgspec.Struct, omit_defaults=True):
    kind: str  # gguf | hf | ollama | known
    ref: str  # what the user typed
    path: str = ""  # the GGUF file or HF folder actually read
    sha256: str = ""  # of the GGUF, or of the HF folder's file list


class StageRecord(msgspec.Struct):
    name: str
    seconds: float
    peak_rss: int = 0  # bytes; 0 when it could not be measured


class BuildRecord(msgspec.Struct, omit_defaults=True):
    """What the marker says. Every field has a default, so older markers still read."""

    files: dict[str, dict[str, Any]] = {}
    name: str = ""  # the name it is served under by default
    names: list[str] = []  # other names it was prepared under (same build, same key)
    model: str = ""
    source: SourceInfo | str = ""
    key: str = ""
    architecture: str = ""
    family: str = ""
    parameter_size: str = ""
    quantization_level: str = ""
    precision: str = ""
    provider: str = ""
    builder: str = ""
    template: str = ""  # where the chat template came from
    context_length: int | None = None
    defaults: dict[str, Any] = {}  # sampling defaults carried over (Ollama params)
    system: str | None = None
    stages: list[StageRecord] = []
    seconds: float = 0.0
    peak_rss: int = 0


class Build(msgspec.Struct, frozen=True):
    """One folder of the catalogue."""

    id: str  # the folder name
    path: Path
    record: BuildRecord

    @property
    def size(self) -> int:
        return sum(int(entry.get("size", 0)) for entry in self.record.files.values())

    def answers_to(self, name: str) -> bool:
        return name in (self.id, self.record.name, *self.record.names)


def is_prepared(path: Path, *, verify_hashes: bool = False) -> bool:
    """Whether ``path`` holds a complete build: the marker exists and every file it
    lists has the recorded size (and, with ``verify_hashes``, the recorded sha256)."""
    try:
        marker = json.loads((path / MARKER).read_text())
        files = marker["files"]
        for name, entry in files.items():
            file = path / name
            if file.stat().st_size != entry["size"]:
                return False
            if verify_hashes and sha256_file(file) != entry["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(files)


def read_record(path: Path) -> BuildRecord | None:
    try:
        return msgspec.json.decode((path / MARKER).read_bytes(), type=BuildRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def write_record(folder: Path, record: BuildRecord, *, hash_files: bool = True) -> BuildRecord:
    """Write the marker; with ``hash_files`` the file list is made from what is in
    ``folder`` now (the build's outputs)."""
    if hash_files:
        files = {
            f.name: {"size": f.stat().st_size, "sha256": sha256_file(f)}
            for f in sorted(folder.iterdir())
            if f.is_file() and f.name != MARKER
        }
        record = msgspec.structs.replace(record, files=files)
    write_atomically(folder / MARKER, msgspec.json.format(msgspec.json.encode(record), indent=2).decode())
    return record


def builds(home: Path | None = None) -> list[Build]:
    """Every intact build, by folder name."""
    root = models_dir(home)
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    found = []
    for folder in folders:
        record = read_record(folder)
        if record is not None and is_prepared(folder):
            found.append(Build(folder.name, folder, record))
    return found


def with_key(key: str, home: Path | None = None) -> Build | None:
    return next((b for b in builds(home) if b.record.key == key), None)


def find(name: str, providers: list[str], home: Path | None = None) -> Build:
    """The build a config entry's ``model: NAME`` means: a folder name, else a served
    name, built for the first of ``providers`` that has one. Raises LookupError with
    what there is."""
    every = builds(home)
    exact = [b for b in every if b.id == name]
    if exact:
        return exact[0]
    named = [b for b in every if b.answers_to(name)]
    for provider in providers:
        matches = [b for b in named if b.record.provider == provider]
        if len(matches) == 1:
            return matches[0]
        if matches:
            choices = ", ".join(b.id for b in matches)
            raise LookupError(f"several builds of '{name}' for {provider} ({choices}); name one of them in 'model:'")
    if named:
        built_for = ", ".join(f"{b.id} ({b.record.provider})" for b in named)
        raise LookupError(f"'{name}' is built only as {built_for}, not for {' or '.join(providers)}")
    known = ", ".join(b.id for b in every) or "none"
    raise LookupError(f"no model named '{name}' is built in {models_dir(home)} (built: {known}); "
                      f"build it with: dragoman models prepare SOURCE --name {name}")


def add_name(build: Build, name: str) -> Build:
    """Record that ``build`` was also prepared under ``name`` (same content, same options)."""
    if build.answers_to(name):
        return build
    record = msgspec.structs.replace(build.record, names=[*build.record.names, name])
    write_record(build.path, record, hash_files=False)
    return Build(build.id, build.path, record)
