"""Pulling a model by name from an Ollama registry, as ``ollama pull`` does (ollama/ollama
``server/images.go``, ``server/download.go``):

- ``GET {registry}/v2/{namespace}/{model}/manifests/{tag}`` with
  ``Accept: application/vnd.docker.distribution.manifest.v2+json``; the manifest lists a
  config blob and the layers (model, template, params, license, system…) by sha256 digest;
- each blob ``GET {registry}/v2/{namespace}/{model}/blobs/{digest}`` (the public registry
  answers 307 to a CDN address, followed here), resumed with ``Range`` from what a
  previous try left;
- progress in Ollama's ``/api/pull`` shape: ``pulling <12 hex>`` with ``digest``, ``total``
  and ``completed`` bytes, then ``verifying sha256 digest``, ``writing manifest``.

What is pulled goes into an Ollama-store layout of dragoman's own
(``DRAGOMAN_HOME/ollama``: ``blobs/sha256-<hex>``, ``manifests/<host>/<ns>/<model>/<tag>``),
which :mod:`.ollama_store` reads like Ollama's, so the build is ``prepare ollama:NAME``'s.
A blob is written to ``…-partial`` and renamed only once its sha256 is the digest (a
mismatch deletes it), and the manifest is written last: a half-done pull is never taken
for a finished model, and the next pull resumes it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec

from dragoman.backends.onnx.prepare import file_lock, ollama_store
from dragoman.backends.onnx.prepare.support import PrepareError, check_resources, human_bytes
from dragoman.backends.pull_progress import PullProgress

DEFAULT_REGISTRY = "https://registry.ollama.ai"
RETRIES = 3  # a dropped connection resumes from where it stopped, this many times in a row
DISK_MARGIN = 64 << 20
REPORT_EVERY = 1 << 20  # bytes between progress lines of one blob (and at least 1% of it)
_TIMEOUT = httpx.Timeout(30.0, read=60.0)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")

Report = Callable[[PullProgress], None]

_address = DEFAULT_REGISTRY


def configure(address: str) -> None:
    """The registry a plain name is pulled from (``server.registry``); empty turns registry
    pulls off. Set once by the server at start and by the command line."""
    global _address
    _address = address.rstrip("/")


def address() -> str:
    return _address


def base_url(name: ollama_store.OllamaName, registry: str) -> str:
    """Where ``name``'s host is: the configured registry for Ollama's own host, else the host
    the name gives (``https://``, as Ollama does without ``--insecure``)."""
    if name.host.lower() == ollama_store.DEFAULT_HOST:
        return registry.rstrip("/")
    return f"https://{name.host}"


async def pull(text: str, *, registry: str, home: Path | None = None, report: Report | None = None) -> ollama_store.OllamaName:
    """Download ``text`` (``[host/][namespace/]model[:tag]``) into :func:`ollama_store.pulled_store`;
    its name, once the manifest is written. The name is checked before any request."""
    name = ollama_store.parse_name(text)
    if not registry:
        raise PrepareError(f"'{name.display}' is not on this machine and pulls from a registry are turned off "
                           "(server.registry is empty); set it to https://registry.ollama.ai or a mirror")  # fmt: skip
    say = report or (lambda _: None)
    base = base_url(name, registry)
    store = ollama_store.pulled_store(home)
    async with httpx.AsyncClient(follow_redirects=True, timeout=_TIMEOUT) as client:
        raw, manifest = await _manifest(client, base, name)
        layers = [*([manifest.config] if manifest.config is not None else []), *manifest.layers]
        for layer in layers:
            ollama_store.blob_path(store, layer.digest)  # a digest that is not sha256 is refused here
            if layer.size < 0:
                raise PrepareError(f"pull model manifest: the manifest of '{name.display}' gives {layer.digest[:19]}… "
                                   f"a size of {layer.size}; not an Ollama manifest")  # fmt: skip
        ollama_store.model_layer(manifest, name)
        _check_disk(store, name, _missing_bytes(store, layers))
        for layer in layers:
            # One download of a blob at a time, across this machine's processes and pulls:
            # two would append to one -partial file.
            async with file_lock.held(store / ".locks" / f"{layer.digest.replace(':', '-')}.lock"):
                await _blob(client, f"{base}/v2/{name.namespace}/{name.model}/blobs/{layer.digest}", store, name, layer, say)
    say(PullProgress(status="verifying sha256 digest"))  # each blob was, as it arrived
    say(PullProgress(status="writing manifest"))
    _write_manifest(store, name, raw)
    return name


async def _manifest(client: httpx.AsyncClient, base: str, name: ollama_store.OllamaName) -> tuple[bytes, ollama_store.Manifest]:
    url = f"{base}/v2/{name.namespace}/{name.model}/manifests/{name.tag}"
    try:
        async with client.stream("GET", url, headers={"Accept": ollama_store.MANIFEST_MEDIA_TYPE}) as reply:
            if reply.status_code == 404:
                raise PrepareError(f"pull model manifest: the registry {base} has no model '{name.display}'; "
                                   "check the name and tag (ollama.com/library lists them)")  # fmt: skip
            if reply.status_code != 200:
                raise PrepareError(f"pull model manifest: the registry {base} answered {reply.status_code} "
                                   f"for '{name.display}'; try again later")  # fmt: skip
            raw = await _bounded(reply, ollama_store.MAX_MANIFEST)
            said = reply.headers.get("Docker-Content-Digest")
    except httpx.HTTPError as exc:
        raise PrepareError(f"pull model manifest: cannot reach the registry {base} ({exc}); check server.registry "
                           "and the network")  # fmt: skip
    if raw is None:
        raise PrepareError(f"pull model manifest: the registry's manifest of '{name.display}' is over "
                           f"{human_bytes(ollama_store.MAX_MANIFEST)}; not an Ollama manifest")  # fmt: skip
    if said and said != f"sha256:{hashlib.sha256(raw).hexdigest()}":
        raise PrepareError(f"pull model manifest: the manifest of '{name.display}' does not hash to its "
                           f"Docker-Content-Digest ({said[:19]}…); try again")  # fmt: skip
    try:
        return raw, msgspec.json.decode(raw, type=ollama_store.Manifest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PrepareError(f"pull model manifest: the registry's manifest of '{name.display}' is not an Ollama "
                           f"manifest: {exc}") from None  # fmt: skip


async def _bounded(reply: httpx.Response, cap: int) -> bytes | None:
    data = bytearray()
    async for chunk in reply.aiter_bytes():
        data += chunk
        if len(data) > cap:
            return None
    return bytes(data)


def _partial(store: Path, digest: str) -> Path:
    final = ollama_store.blob_path(store, digest)
    return final.with_name(final.name + "-partial")


def _missing_bytes(store: Path, layers: list[ollama_store.Layer]) -> int:
    missing = 0
    for layer in {layer.digest: layer for layer in layers}.values():
        final, partial = ollama_store.blob_path(store, layer.digest), _partial(store, layer.digest)
        if _size(final) == layer.size:
            continue
        missing += max(layer.size - (_size(partial) or 0), 0)
    return missing


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _check_disk(store: Path, name: ollama_store.OllamaName, needed: int) -> None:
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    problems = check_resources(disk_needed=needed + DISK_MARGIN, disk_at=store, memory_needed=0,
                               what=f"downloading '{name.display}' ({human_bytes(needed)} left to fetch)")  # fmt: skip
    if problems:
        raise PrepareError(problems[0].replace(" while it builds", ""))


async def _blob(
    client: httpx.AsyncClient, url: str, store: Path, name: ollama_store.OllamaName, layer: ollama_store.Layer, say: Report
) -> None:
    """One blob into the store: resumed from its ``-partial`` file, hashed as it arrives,
    renamed to its digest's name only when the hash is the digest."""
    final, partial = ollama_store.blob_path(store, layer.digest), _partial(store, layer.digest)
    status = f"pulling {layer.digest.removeprefix('sha256:')[:12]}"
    if _size(final) == layer.size:  # already here (a build re-hashes the model blob before reading it)
        say(PullProgress(status=status, digest=layer.digest, total=layer.size, completed=layer.size))
        return
    hasher, have = await asyncio.to_thread(_hash_partial, partial, layer.size)
    _check_disk(store, name, layer.size - have)
    step = max(REPORT_EVERY, layer.size // 100)
    say(PullProgress(status=status, digest=layer.digest, total=layer.size, completed=have))
    failures = 0
    while have < layer.size:
        try:
            have, hasher = await _fetch(client, url, partial, layer, have, hasher, status, step, say)
        except OSError as exc:  # a full disk: what was written stays a -partial, resumed by the next pull
            raise PrepareError(f"pulling {layer.digest[:19]}… of '{name.display}': cannot write {partial}: "
                               f"{exc.strerror or exc}; free some space and pull again to resume") from None  # fmt: skip
        except httpx.TransportError as exc:
            failures += 1
            if failures > RETRIES:
                raise PrepareError(f"pulling {layer.digest[:19]}… of '{name.display}' stopped ({exc or type(exc).__name__}) "
                                   f"after {human_bytes(have)} of {human_bytes(layer.size)}, {RETRIES} times in a row; "
                                   "pull again to resume from there") from None  # fmt: skip
            await asyncio.sleep(0.2 * failures)
            # What reached the disk is where the next try starts.
            hasher, have = await asyncio.to_thread(_hash_partial, partial, layer.size)
    actual = hasher.hexdigest()
    if f"sha256:{actual}" != layer.digest.lower():
        partial.unlink(missing_ok=True)
        raise PrepareError(f"digest mismatch: the blob {layer.digest[:19]}… of '{name.display}' downloaded as "
                           f"sha256:{actual[:12]}…; the partial download was deleted — pull again (if it happens "
                           "again, the registry or a proxy between serves other bytes)")  # fmt: skip
    os.replace(partial, final)


def _hash_partial(partial: Path, size: int) -> tuple[hashlib._Hash, int]:
    """The hash of what an earlier try left, and its length (a file longer than the blob
    is not a prefix of it: dropped)."""
    hasher = hashlib.sha256()
    have = _size(partial) or 0
    if have > size:
        partial.unlink()
        return hasher, 0
    if have:
        with partial.open("rb") as file:
            while chunk := file.read(1 << 20):
                hasher.update(chunk)
    return hasher, have


async def _fetch(
    client: httpx.AsyncClient, url: str, partial: Path, layer: ollama_store.Layer, have: int,
    hasher: hashlib._Hash, status: str, step: int, say: Report,
) -> tuple[int, hashlib._Hash]:  # fmt: skip
    """One GET of the rest of the blob, appended to ``partial``; the bytes now held."""
    headers = {"Range": f"bytes={have}-"} if have else {}
    async with client.stream("GET", url, headers=headers) as reply:
        if reply.status_code == 206 and have:
            match = _CONTENT_RANGE.match(reply.headers.get("Content-Range", ""))
            if match is None or int(match.group(1)) != have:
                raise PrepareError(f"pulling {layer.digest[:19]}…: the registry answered the range from byte {have} "
                                   f"with '{reply.headers.get('Content-Range')}'; delete {partial} and pull again")  # fmt: skip
        elif reply.status_code == 200:
            if have:  # the range was not honoured: the whole blob comes again
                hasher, have = hashlib.sha256(), 0
        else:
            raise PrepareError(f"pulling {layer.digest[:19]}…: the registry answered {reply.status_code}; try again later")
        reported = have
        with partial.open("ab" if have else "wb") as file:
            async for chunk in reply.aiter_bytes():
                if have + len(chunk) > layer.size:
                    file.close()
                    partial.unlink(missing_ok=True)
                    raise PrepareError(f"digest mismatch: the blob {layer.digest[:19]}… is longer than the {layer.size} "
                                       "bytes its manifest says; the partial download was deleted — pull again")  # fmt: skip
                file.write(chunk)
                hasher.update(chunk)
                have += len(chunk)
                if have - reported >= step or have == layer.size:
                    file.flush()
                    reported = have
                    say(PullProgress(status=status, digest=layer.digest, total=layer.size, completed=have))
    if have < layer.size:  # the body ended early: as a dropped connection
        raise httpx.RemoteProtocolError(f"the body ended at byte {have}")
    return have, hasher


def _write_manifest(store: Path, name: ollama_store.OllamaName, raw: bytes) -> None:
    """Last, and by rename: a manifest is the mark of a model whose blobs are all here."""
    path = Path(name.manifest_path(store))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_bytes(raw)
    os.replace(temporary, path)


__all__ = ["DEFAULT_REGISTRY", "address", "configure", "pull"]
