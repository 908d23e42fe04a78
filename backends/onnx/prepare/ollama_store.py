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
from pathlib import Path
from typing import Any

import msgspec

from backends.onnx.prepare.support import PrepareError

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
MAX_TEXT_LAYER = 1 << 20  # a template, system prompt or params blob larger than this is not one


def store_dir() -> Path:
    """``$OLLAMA_MODELS``, else ``~/.ollama/models`` (Path.home() is %USERPROFILE% on Windows)."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


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

    def manifest_path(self, store: Path) -> Path:
        return store / "manifests" / self.host / self.namespace / self.model / self.tag


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
    match = _DIGEST.match(digest)
    if not match:
        raise PrepareError(f"layer digest '{digest}' is not a sha256 digest")
    return store / "blobs" / f"sha256-{match.group(1)}"


def read_model(text: str, store: Path | None = None) -> OllamaModel:
    store = store or store_dir()
    name = parse_name(text)
    path = name.manifest_path(store)
    if not path.is_file():
        known = ", ".join(list_models(store)[:20]) or "none"
        raise PrepareError(f"no Ollama model '{name.display}' in {store} (looked for {path}; the store has: {known}); "
                           f"pull it with Ollama first (ollama pull {name.display}), or set OLLAMA_MODELS")  # fmt: skip
    try:
        manifest = msgspec.json.decode(path.read_bytes(), type=Manifest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PrepareError(f"{path} is not an Ollama manifest: {exc}") from exc
    config = _json_blob(store, manifest.config) if manifest.config is not None else {}
    if config.get("remote_host"):
        raise PrepareError(f"'{name.display}' is an Ollama cloud model ({config['remote_host']}): it has no weights in the store")
    by_type: dict[str, list[Layer]] = {}
    for layer in manifest.layers:
        by_type.setdefault(layer.mediaType, []).append(layer)
    models = by_type.get(MODEL, [])
    if len(models) != 1:
        raise PrepareError(f"'{name.display}' has {len(models)} model layers; prepare reads exactly one GGUF")
    if ADAPTER in by_type:
        raise PrepareError(f"'{name.display}' applies a LoRA adapter layer, which the ONNX builder cannot merge; "
                           "prepare its base model, or serve it through an Ollama upstream (backend: ollama)")  # fmt: skip
    gguf = blob_path(store, models[0].digest)
    try:
        size = gguf.stat().st_size
    except OSError:
        raise PrepareError(f"'{name.display}': its model blob {gguf} is missing; pull the model again with Ollama") from None
    if size != models[0].size:
        raise PrepareError(f"'{name.display}': {gguf} has {size} bytes, the manifest says {models[0].size}; "
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
        gguf_digest=_DIGEST.match(models[0].digest).group(1).lower(),  # type: ignore[union-attr]
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


def _text_blob(store: Path, layer: Layer) -> str:
    if layer.size > MAX_TEXT_LAYER:
        raise PrepareError(f"layer {layer.digest} ({layer.mediaType}) is {layer.size} bytes; not a text layer")
    try:
        return blob_path(store, layer.digest).read_text(encoding="utf-8")
    except OSError as exc:
        raise PrepareError(f"cannot read the {layer.mediaType} layer: {exc}; pull the model again with Ollama") from exc


def _json_blob(store: Path, layer: Layer) -> dict[str, Any]:
    text = _text_blob(store, layer)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise PrepareError(f"the {layer.mediaType} layer {layer.digest} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PrepareError(f"the {layer.mediaType} layer {layer.digest} is not a JSON object")
    return value
