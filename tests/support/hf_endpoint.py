"""A stand-in Hugging Face Hub on 127.0.0.1 speaking what ``huggingface_hub`` speaks
(``HfApi.model_info``, ``hf_hub_download``; read from its source):

- ``GET /api/models/ORG/REPO/revision/REV?blobs=True``: ``{"id", "sha", "siblings": [{"rfilename",
  "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]}``; an unknown repository is a 404
  with ``X-Error-Code: RepoNotFound``, as the Hub answers;
- ``HEAD`` / ``GET /ORG/REPO/resolve/REV/PATH``: a small file answers itself (``ETag`` its git
  blob id, ``X-Repo-Commit``, ``Content-Length``); an LFS file answers 302 to its storage on
  another origin (a second port, as the Hub's CDN is another host) with ``X-Linked-Etag``
  (its sha256), ``X-Linked-Size`` and ``X-Repo-Commit``; an unknown file is a 404 with
  ``X-Error-Code: EntryNotFound``;
- the storage serves ``Range`` (206, ``Content-Range``), can drop a connection part way
  through a file once, and serve a file with a byte flipped.

Every request is recorded (method, path, Range).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from tests.support.blob_host import StoredBytes, logged, running_apps, send_ranged

LFS_SUFFIXES = (".onnx", ".data", ".gguf", ".bin")


class HubFile(StoredBytes):
    def __init__(self, path: str, data: bytes | Path) -> None:
        super().__init__(data)
        self.path = path
        self.lfs = path.endswith(LFS_SUFFIXES) or self.size > 64 * 1024
        content = self.pointer() if self.lfs else self.read(0, self.size)
        self.blob_id = hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()

    def pointer(self) -> bytes:
        return f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n".encode()

    def sibling(self) -> dict[str, object]:
        entry: dict[str, object] = {"rfilename": self.path, "size": self.size, "blobId": self.blob_id}
        if self.lfs:
            entry["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": len(self.pointer())}
        return entry


class Hub:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, HubFile]] = {}
        self.commits: dict[str, str] = {}
        self.requests: list[str] = []
        self.drop_once: dict[str, int] = {}  # sha256 → bytes sent before the connection drops
        self.corrupt: set[str] = set()  # repository paths served with their last byte flipped
        self.url = self.storage = ""

    def add(self, repo: str, files: dict[str, bytes | Path]) -> None:
        self.repos[repo] = {path: HubFile(path, data) for path, data in files.items()}
        self.commits[repo] = hashlib.sha1(repo.encode()).hexdigest()

    def file(self, repo: str, path: str) -> HubFile:
        return self.repos[repo][path]

    async def model_info(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        repo = f"{request.match_info['org']}/{request.match_info['repo']}"
        if repo not in self.repos:
            return _error(404, "RepoNotFound", "Repository not found")
        siblings = [f.sibling() for f in self.repos[repo].values()]
        return web.json_response({"id": repo, "modelId": repo, "sha": self.commits[repo], "private": False,
                                  "siblings": siblings})  # fmt: skip

    async def resolve(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        repo = f"{request.match_info['org']}/{request.match_info['repo']}"
        if repo not in self.repos:
            return _error(404, "RepoNotFound", "Repository not found")
        if request.match_info["rev"] not in ("main", self.commits[repo]):
            return _error(404, "RevisionNotFound", "Revision not found")
        found = self.repos[repo].get(request.match_info["path"])
        if found is None:
            return _error(404, "EntryNotFound", "Entry not found", commit=self.commits[repo])
        commit = {"X-Repo-Commit": self.commits[repo]}
        if found.lfs:
            return web.Response(status=302, headers={
                **commit, "Location": f"{self.storage}/lfs/{found.sha256}?repo={repo}&path={found.path}&sig=stand-in",
                "X-Linked-Etag": f'"{found.sha256}"', "X-Linked-Size": str(found.size), "ETag": f'"{found.blob_id}"',
            })  # fmt: skip
        body = found.read(0, found.size)
        if found.path in self.corrupt:
            body = body[:-1] + bytes([body[-1] ^ 0xFF])
        return web.Response(body=body, headers={**commit, "ETag": f'"{found.blob_id}"', "Content-Type": "application/octet-stream"})

    async def lfs(self, request: web.Request) -> web.StreamResponse:
        self._log(request)
        files = self.repos.get(request.query.get("repo", ""), {})
        found = files.get(request.query.get("path", ""))
        if found is None or found.sha256 != request.match_info["sha256"]:
            return web.Response(status=403, text="bad signature")
        return await send_ranged(request, found, corrupt=found.path in self.corrupt, cut=self.drop_once.pop(found.sha256, None))

    def _log(self, request: web.Request) -> None:
        self.requests.append(logged(request))

    def hub_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/models/{org}/{repo}/revision/{rev}", self.model_info)
        app.router.add_get("/{org}/{repo}/resolve/{rev}/{path:.+}", self.resolve)
        return app

    def storage_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/lfs/{sha256}", self.lfs)
        return app


def _error(status: int, code: str, message: str, commit: str | None = None) -> web.Response:
    headers = {"X-Error-Code": code, "X-Error-Message": message, **({"X-Repo-Commit": commit} if commit else {})}
    return web.json_response({"error": message}, status=status, headers=headers)


@contextmanager
def running_hub() -> Iterator[Hub]:
    """The stand-in Hub and its storage, each on a free port of 127.0.0.1, in a thread."""
    hub = Hub()
    with running_apps("hub", hub.hub_app(), hub.storage_app()) as (hub.url, hub.storage):
        yield hub
