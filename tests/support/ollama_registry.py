"""A stand-in Ollama registry on 127.0.0.1 speaking the protocol ``ollama pull`` speaks
(ollama/ollama ``server/images.go`` pullModelManifest, ``server/download.go``):

- ``GET /v2/<namespace>/<model>/manifests/<tag>`` answers the manifest with
  ``Content-Type: application/vnd.docker.distribution.manifest.v2+json`` and
  ``Docker-Content-Digest``, when asked with that media type in ``Accept``;
- ``GET /v2/<namespace>/<model>/blobs/<digest>`` answers 307 to another path (the public
  registry sends its blobs from a CDN), which serves the bytes with ``Range`` support.

It can drop a connection part way through a blob once, and serve other bytes than a
blob's digest, and it records every path asked for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from tests.support.blob_host import StoredBytes, logged, running_apps, send_ranged

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG = "application/vnd.docker.container.image.v1+json"


class Blob(StoredBytes):
    def __init__(self, data: bytes | Path, media_type: str) -> None:
        super().__init__(data)
        self.media_type = media_type
        self.digest = "sha256:" + self.sha256


class Registry:
    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}  # "ns/model/tag" → manifest bytes
        self.blobs: dict[str, Blob] = {}
        self.requests: list[str] = []  # "GET /path (Range: …)"
        self.drop_once: dict[str, int] = {}  # digest → bytes sent before the connection drops
        self.corrupt: set[str] = set()  # digests served with their last byte flipped
        self.pace = 0.0  # seconds between 1 MiB chunks of a blob
        self.url = ""

    def add(self, name: str, layers: list[tuple[str, bytes | Path]], config: dict[str, object] | None = None) -> dict[str, object]:
        """``name`` is ``namespace/model:tag``; the layers are (media type, content)."""
        path, tag = name.rsplit(":", 1)
        blobs = [Blob(data, media_type) for media_type, data in layers]
        config_blob = Blob(json.dumps(config or {"model_format": "gguf", "model_family": "llama"}).encode(), CONFIG)
        for blob in (config_blob, *blobs):
            self.blobs[blob.digest] = blob
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": config_blob.digest, "size": config_blob.size},
            "layers": [{"mediaType": b.media_type, "digest": b.digest, "size": b.size} for b in blobs],
        }
        self.manifests[f"{path}/{tag}"] = json.dumps(manifest).encode()
        return manifest

    async def manifest(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        key = f"{request.match_info['ns']}/{request.match_info['model']}/{request.match_info['tag']}"
        body = self.manifests.get(key)
        if body is None or MANIFEST not in request.headers.get("Accept", ""):
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]}, status=404)
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        return web.Response(body=body, headers={"Content-Type": MANIFEST, "Docker-Content-Digest": digest})

    async def blob(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        digest = request.match_info["digest"]
        if digest not in self.blobs:
            return web.json_response({"errors": [{"code": "BLOB_UNKNOWN"}]}, status=404)
        return web.Response(status=307, headers={"Location": f"/cdn/{digest}?expires=soon"})

    async def cdn(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        blob = self.blobs.get(request.match_info["digest"])
        if blob is None:
            return web.Response(status=404)
        return await send_ranged(request, blob, corrupt=blob.digest in self.corrupt, cut=self.drop_once.pop(blob.digest, None), pace=self.pace)

    def _log(self, request: web.Request) -> None:
        self.requests.append(logged(request))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v2/{ns}/{model}/manifests/{tag}", self.manifest)
        app.router.add_get("/v2/{ns}/{model}/blobs/{digest}", self.blob)
        app.router.add_get("/cdn/{digest}", self.cdn)
        return app


@contextmanager
def running_registry() -> Iterator[Registry]:
    """The stand-in on a free port of 127.0.0.1, in a thread of its own."""
    registry = Registry()
    with running_apps("registry", registry.app()) as (registry.url,):
        yield registry
