"""Reading a model out of the local Ollama store, as Ollama itself lays it out
(ollama/ollama ``manifest/`` and ``types/model/name.go``):

- the store is ``$OLLAMA_MODELS``, else ``~/.ollama/models`` (``%USERPROFILE%\\.ollama\\models``
  on Windows);
- a name ``[host/][namespace/]model[:tag]`` defaults to ``registry.ollama.ai``,
  ``library`` and ``latest``; its manifest is ``manifests/<host>/<namespace>/<model>/<tag>``;
- the manifest (``schemaVersion`` 2, docker manifest v2 media type) has a ``config``
  layer (``application/vnd.docker.container.image.v1+json``: model_format, model_family,
  model_type, file_type, renderer, parser, remote_host…) and ``layers`` with
  ``mediaType``, ``digest`` (``sha256:<hex>``) and ``size``;
- each blob is ``blobs/sha256-<hex>`` (the colon becomes a dash);
- layer media types: ``application/vnd.ollama.image.model`` (the GGUF),
  ``….template`` (a Go template; ``….prompt`` in old models), ``….system`` (text),
  ``….params`` (JSON options: stop, temperature, …), ``….messages``, ``….license``,
  ``….adapter`` (LoRA), ``….projector`` (vision).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path, PurePath
from typing import Any

import msgspec

from dragoman.backends.onnx.prepare.store_files import checked_stat, inside, read_bounded
from dragoman.backends.onnx.prepare.support import PrepareError, dragoman_home

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MODEL = "application/vnd.ollama.image.model"
TEMPLATE = "application/vnd.ollama.image.template"
OLD_TEMPLATE = "application/vnd.ollama.image.prompt"
SYSTEM = "application/vnd.ollama.image.system"
PARAMS = "application/vnd.ollama.image.params"
MESSAGES = "application/vnd.ollama.image.messages"
LICENSE = "application/vnd.ollama.image.license"
ADAPTER = "application/vnd.ollama.image.adapter"
PROJECTOR = "application/vnd.ollama.image.projector"
MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-fA-F]{64})$")
MAX_TEXT_LAYER = 1 << 20  # a template, system prompt, params or config blob larger than this is not one
MAX_MANIFEST = 1 << 20  # Ollama's manifests are a few hundred bytes
_DRIVE = re.compile(r"^[A-Za-z]:")  # 'D:' joined to a Windows path replaces the store with drive D


def store_dir() -> Path:
    """``$OLLAMA_MODELS``, else ``~/.ollama/models`` (Path.home() is %USERPROFILE% on Windows)."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


def pulled_store(home: Path | None = None) -> Path:
    """Where ``dragoman models pull`` and ``/api/pull`` put what they download from a
    registry (:mod:`.registry`), in the same layout: ``DRAGOMAN_HOME/ollama``."""
    return (home or dragoman_home()) / "ollama"


def find_store(name: OllamaName) -> Path:
    """Ollama's own store when it has ``name``, else dragoman's pulled store when that has
    it, else Ollama's (whose error then says what to do)."""
    own = store_dir()
    if has_model(name, own):
        return own
    pulled = pulled_store()
    return pulled if has_model(name, pulled) else own


class OllamaName(msgspec.Struct, frozen=True):
    host: str
    namespace: str
    model: str
    tag: str

    @property
    def display(self) -> str:
        """Ollama's DisplayShortest: ``model:tag``, with namespace/host when not default."""
        if self.host.lower() != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    def manifest_path(self, store: PurePath) -> PurePath:
        """Where the manifest is; a :class:`PrepareError` when that is not inside the
        store (parse_name keeps that from happening: this is the second line)."""
        path = store / "manifests" / self.host / self.namespace / self.model / self.tag
        if not inside(store, path):
            raise PrepareError(f"'{self.display}' names a path outside the Ollama store")
        return path


def parse_name(text: str) -> OllamaName:
    """Ollama's ParseName: the tag after the last ':' past the last '/', then model,
    namespace and host from the right; every part checked as Ollama checks it (which
    also keeps '..' and separators out of the manifest path)."""
    rest, tag = text, DEFAULT_TAG
    if rest.rfind(":") > rest.rfind("/"):
        rest, tag = rest.rsplit(":", 1)
    parts = rest.split("/")
    if len(parts) > 3:
        raise PrepareError(f"'{text}' is not an Ollama model name ([host/][namespace/]model[:tag])")
    model = parts[-1]
    namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
    host = parts[-3] if len(parts) == 3 else DEFAULT_HOST
    host = host.split("://", 1)[-1]
    if _DRIVE.match(host):
        raise PrepareError(f"'{text}' is not an Ollama model name: a host of one letter before ':' ('{host}') "
                           "would name a Windows drive")  # fmt: skip
    for kind, part in (("host", host), ("namespace", namespace), ("model", model), ("tag", tag)):
        if not _valid_part(kind, part):
            raise PrepareError(f"'{text}' is not an Ollama model name: bad {kind} '{part}'")
    return OllamaName(host, namespace, model, tag)


def _valid_part(kind: str, part: str) -> bool:
    if not 1 <= len(part) <= (350 if kind == "host" else 80):
        return False
    if not (part[0].isascii() and (part[0].isalnum() or part[0] == "_")):
        return False
    for char in part[1:]:
        if char in "_-" or (char.isascii() and char.isalnum()):
            continue
        if char == "." and kind != "namespace":
            continue
        if char == ":" and kind == "host":
            continue
        return False
    return True


class Layer(msgspec.Struct, frozen=True):
    mediaType: str
    digest: str
    size: int
    name: str = ""
    From: str = msgspec.field(default="", name="from")


class Manifest(msgspec.Struct, frozen=True):
    schemaVersion: int
    layers: list[Layer]
    mediaType: str = ""
    config: Layer | None = None


class OllamaModel(msgspec.Struct, frozen=True):
    """What prepare needs from one Ollama model."""

    name: OllamaName
    gguf: Path
    gguf_digest: str  # hex sha256 of the GGUF (the blob's name)
    template: str | None = None  # the Go template, as text
    system: str | None = None
    params: dict[str, Any] = {}
    config: dict[str, Any] = {}
    notes: list[str] = []  # layers read but not carried over


def blob_path(store: Path, digest: str) -> Path:
    return store / "blobs" / f"sha256-{_hex(digest)}"


def read_manifest(name: OllamaName, store: Path) -> Manifest:
    """The manifest of ``name``, read as :mod:`.store_files` reads (regular, inside,
    bounded); a :class:`PrepareError` saying what to do when it is not there."""
    path = Path(name.manifest_path(store))
    try:
        present = os.path.lexists(path)
    except OSError:
        present = False
    if not present:
        known = ", ".join(list_models(store)[:20]) or "none"
        raise PrepareError(f"no Ollama model '{name.display}' in the Ollama store (the store has: {known}); "
                           f"pull it with Ollama first (ollama pull {name.display}), or set OLLAMA_MODELS")  # fmt: skip
    data = read_bounded(store, path, what=f"the manifest of '{name.display}'", cap=MAX_MANIFEST)
    try:
        return msgspec.json.decode(data, type=Manifest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PrepareError(f"the manifest of '{name.display}' is not an Ollama manifest: {exc}") from exc


def has_model(name: OllamaName, store: Path) -> bool:
    """Whether the store has a manifest for ``name`` that may be read (a stat, no read)."""
    try:
        checked_stat(store, Path(name.manifest_path(store)), "the manifest")
    except PrepareError:
        return False
    return True


def model_layer(manifest: Manifest, name: OllamaName) -> Layer:
    models = [layer for layer in manifest.layers if layer.mediaType == MODEL]
    if len(models) != 1:
        raise PrepareError(f"'{name.display}' has {len(models)} model layers; prepare reads exactly one GGUF")
    return models[0]


def read_model(text: str, store: Path | None = None) -> OllamaModel:
    name = parse_name(text)
    store = store or find_store(name)
    manifest = read_manifest(name, store)
    config = _json_blob(store, manifest.config) if manifest.config is not None else {}
    if config.get("remote_host"):
        raise PrepareError(f"'{name.display}' is an Ollama cloud model ({config['remote_host']}): it has no weights in the store")
    by_type: dict[str, list[Layer]] = {}
    for layer in manifest.layers:
        by_type.setdefault(layer.mediaType, []).append(layer)
    model = model_layer(manifest, name)
    if ADAPTER in by_type:
        raise PrepareError(f"'{name.display}' applies a LoRA adapter layer, which the ONNX builder cannot merge; "
                           "prepare its base model, or serve it through an Ollama upstream (backend: ollama)")  # fmt: skip
    gguf = blob_path(store, model.digest)
    size = checked_stat(store, gguf, f"the model blob of '{name.display}' ({model.digest})").st_size
    if size != model.size:
        raise PrepareError(f"'{name.display}': its model blob has {size} bytes, the manifest says {model.size}; "
                           "the pull was interrupted — pull it again with Ollama")  # fmt: skip
    notes = []
    if PROJECTOR in by_type:
        notes.append("the vision projector layer is not carried over (text only)")
    if MESSAGES in by_type:
        notes.append("the example messages layer is not carried over")
    if config.get("renderer") or config.get("parser"):
        notes.append(f"Ollama renders this model with its built-in '{config.get('renderer') or config.get('parser')}' code, "
                     "not a template; dragoman uses the GGUF's chat template")  # fmt: skip
    templates = by_type.get(TEMPLATE) or by_type.get(OLD_TEMPLATE) or []
    systems = by_type.get(SYSTEM, [])
    params = by_type.get(PARAMS, [])
    return OllamaModel(
        name=name,
        gguf=gguf,
        gguf_digest=_hex(model.digest),
        template=_text_blob(store, templates[-1]) if templates else None,
        system=_text_blob(store, systems[-1]) if systems else None,
        params=_json_blob(store, params[-1]) if params else {},
        config=config,
        notes=notes,
    )


def list_models(store: Path | None = None) -> list[str]:
    """Every model in the store, by display name (Ollama's glob of four levels)."""
    root = (store or store_dir()) / "manifests"
    names = []
    for path in sorted(root.glob("*/*/*/*")):
        if path.is_file():
            rel = path.relative_to(root).parts
            names.append(OllamaName(*rel).display)
    return names


def _hex(digest: str) -> str:
    match = _DIGEST.match(digest)
    if not match:
        raise PrepareError(f"layer digest '{digest}' is not a sha256 digest")
    return match.group(1).lower()


def _text_blob(store: Path, layer: Layer) -> str:
    """A small layer's text: a regular file in the store of the declared size (at most
    :data:`MAX_TEXT_LAYER`) holding the bytes its digest names."""
    kind = "config" if layer.mediaType == CONFIG_MEDIA_TYPE else layer.mediaType.rsplit(".", 1)[-1]
    what = f"the {kind} layer ({layer.digest})"
    if layer.size > MAX_TEXT_LAYER:
        raise PrepareError(f"{what} declares {layer.size} bytes, over the {MAX_TEXT_LAYER} bytes a text layer may have")
    data = read_bounded(store, blob_path(store, layer.digest), what=what, cap=MAX_TEXT_LAYER, size=layer.size,
                        sha256=_hex(layer.digest))  # fmt: skip
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PrepareError(f"{what} is not UTF-8 text: {exc}") from None


def _json_blob(store: Path, layer: Layer) -> dict[str, Any]:
    text = _text_blob(store, layer)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise PrepareError(f"the {layer.mediaType} layer {layer.digest} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PrepareError(f"the {layer.mediaType} layer {layer.digest} is not a JSON object")
    return value
