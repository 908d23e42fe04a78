"""Pulling from Hugging Face (``hf:`` names, :mod:`.hf_names`) with ``huggingface_hub``:
it talks to ``HF_ENDPOINT`` (read at each pull; default https://huggingface.co), follows
the Hub's redirects to its file storage, resumes a dropped download with ``Range``, and
checks each file's size.

- The repository's file list at one commit (``GET /api/models/ORG/REPO/revision/main?blobs=True``:
  sizes, git blob ids, LFS sha256), so everything after reads that commit.
- An onnxruntime-genai folder (one with ``genai_config.json``): the folders' own
  ``genai_config.json`` say which provider each is for (``session_options.provider_options``:
  none is the CPU, ``cuda``, ``dml``); the one for the provider is downloaded, the smallest
  when several are (int4 before fp16; said, with the others and how to name one). No build:
  it becomes a build of the catalogue (:mod:`.catalogue`) named as pulled.
- A GGUF file goes to ``DRAGOMAN_HOME/huggingface/ORG/REPO/``, then ``prepare`` builds it.

Every file is checked against the list after download (the LFS sha256, else the git blob
id) and deleted when it differs. Files land in a hidden staging folder and the model
folder is renamed into place last, so a pull that stops leaves nothing taken for a model;
files already complete are kept there for the next pull (a file cut part way is
downloaded again: ``huggingface_hub`` resumes only within one pull). Free disk is checked
against the files' sizes first.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from dragoman.backends.onnx.prepare import catalogue
from dragoman.backends.onnx.prepare.catalogue import Build, BuildRecord, SourceInfo
from dragoman.backends.onnx.prepare.hf_names import HfName
from dragoman.backends.onnx.prepare.sources import slug
from dragoman.backends.onnx.prepare.support import PrepareError, check_resources, human_bytes, sha256_file
from dragoman.backends.pull_progress import PullProgress
from dragoman.config.paths import dragoman_home, models_dir

Report = Callable[[PullProgress], None]
GENAI_CONFIG = "genai_config.json"
MAX_CONFIG = 1 << 20  # a genai_config.json is a few KiB
MAX_FOLDERS = 64  # candidate folders whose genai_config.json is read
DISK_MARGIN = 64 << 20
REPORT_EVERY = 1 << 20  # bytes between progress lines of one file (and at least 1% of it)


class RepoFile(msgspec.Struct, frozen=True):
    path: str
    size: int
    blob_id: str = ""  # git's blob sha1 (of the LFS pointer for LFS files)
    sha256: str = ""  # of the content, for LFS files

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha256}" if self.sha256 else f"sha1:{self.blob_id}"


class Listing(msgspec.Struct, frozen=True):
    commit: str
    files: list[RepoFile]


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def listing(name: HfName) -> Listing:
    """The repository's files at its current commit."""
    from huggingface_hub import HfApi

    info = _hub_call(name, lambda: HfApi(endpoint=endpoint()).model_info(name.repo, revision="main", files_metadata=True))
    files = [
        RepoFile(s.rfilename, int(s.size or 0), s.blob_id or "", s.lfs.sha256 if s.lfs is not None else "")
        for s in info.siblings or []
    ]
    if not info.sha:
        raise PrepareError(f"{endpoint()} gave no commit for {name.repo}; is HF_ENDPOINT a Hugging Face Hub?")
    return Listing(info.sha, files)


def _hub_call(name: HfName, call: Callable[[], Any]) -> Any:
    """``call`` with the Hub's failures said for people."""
    import httpx2
    from huggingface_hub import errors

    try:
        return call()
    except errors.RepositoryNotFoundError:
        raise PrepareError(f"pull {name.display}: {endpoint()} has no repository {name.repo} (or it is private or "
                           "gated: set HF_TOKEN); check the name") from None  # fmt: skip
    except (errors.RevisionNotFoundError, errors.EntryNotFoundError) as exc:
        raise PrepareError(f"pull {name.display}: {exc}") from None
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise PrepareError(f"pull {name.display}: {endpoint()} answered {status}; try again later") from None
    except OSError as exc:  # a full disk, a connection refused or cut past the retries
        raise PrepareError(f"pull {name.display}: {exc.strerror or exc}; check HF_ENDPOINT, the network and "
                           "free disk, then pull again (finished files are kept)") from None  # fmt: skip
    except httpx2.TransportError as exc:  # huggingface_hub's HTTP client; not OSErrors
        raise PrepareError(f"pull {name.display}: cannot reach {endpoint()} ({type(exc).__name__}: {exc}); "
                           "check HF_ENDPOINT and the network, then pull again") from None  # fmt: skip


# -- which folder -------------------------------------------------------------------------


def genai_folders(files: list[RepoFile]) -> list[str]:
    return sorted({posixpath.dirname(f.path) for f in files if posixpath.basename(f.path) == GENAI_CONFIG})


def folder_files(files: list[RepoFile], folder: str) -> list[RepoFile]:
    return [f for f in files if posixpath.dirname(f.path) == folder]


def provider_of(config: bytes) -> str:
    """The provider a genai_config.json's decoder session asks for: ``cpu`` when none."""
    try:
        options = json.loads(config)["model"]["decoder"]["session_options"].get("provider_options") or []
        names = [key for option in options if isinstance(option, dict) for key in option]
    except (ValueError, KeyError, TypeError, AttributeError):
        return "?"
    return {"cuda": "cuda", "dml": "dml", "DML": "dml"}.get(names[0], names[0]) if names else "cpu"


def choose_folder(name: HfName, files: list[RepoFile], provider: str, providers: dict[str, str]) -> tuple[str, str]:
    """The folder to pull for ``provider`` (``providers``: each genai folder's provider),
    and a note saying which and what else there is; a :class:`PrepareError` naming the
    folders when none is for ``provider``."""
    if name.path:
        if name.path not in providers:
            raise PrepareError(f"pull {name.display}: '{name.path}' holds no {GENAI_CONFIG}; the repository's "
                               f"onnxruntime-genai folders: {_listed(providers)}")  # fmt: skip
        if providers[name.path] != provider:
            raise PrepareError(f"pull {name.display}: that folder is for {providers[name.path]}, not {provider}; "
                               f"pass --provider {providers[name.path]}, or pick another: {_listed(providers)}")  # fmt: skip
        return name.path, f"pulling the folder {name.path or '(the top)'} ({provider})"
    if not providers:
        raise PrepareError(f"pull {name.display}: the repository has no onnxruntime-genai folder (none holds "
                           f"{GENAI_CONFIG}); for a GGUF in it, name the file: {name.display}/FILE.gguf")  # fmt: skip
    matching = sorted((sum(f.size for f in folder_files(files, d)), d) for d, p in providers.items() if p == provider)
    if not matching:
        raise PrepareError(f"pull {name.display}: no onnxruntime-genai folder for {provider} in the repository; "
                           f"its folders: {_listed(providers)}")  # fmt: skip
    size, chosen = matching[0]
    note = f"pulling the folder {chosen or '(the top)'} ({provider}, {human_bytes(size)})"
    if len(matching) > 1:
        others = ", ".join(f"{name.display}/{d}" for _, d in matching[1:])
        note += f", the smallest for {provider}; another: pull {others}"
    return chosen, note


def _listed(providers: dict[str, str]) -> str:
    return ", ".join(f"{d or '(the top)'} ({p})" for d, p in sorted(providers.items())) or "none"


# -- downloads ----------------------------------------------------------------------------


def staging_dir(name: HfName, commit: str, home: Path | None) -> Path:
    """Hidden (the catalogue skips it), one per repository and commit: what an earlier
    pull finished is found here by the next."""
    return models_dir(home) / f".hf-{slug(name.repo)}-{commit[:12]}.partial"


def download(name: HfName, commit: str, file: RepoFile, into: Path, report: Report) -> Path:
    """``file`` at ``commit`` into ``into`` (keeping the repository's path), checked
    against the listing; the path written."""
    from huggingface_hub import hf_hub_download
    from tqdm import tqdm

    status = f"pulling {file.path}"
    step = max(REPORT_EVERY, file.size // 100)

    class Bar(tqdm):  # what huggingface_hub updates as bytes arrive
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            super().__init__(*args, **{**kwargs, "disable": True})
            self.done = self.told = int(kwargs.get("initial") or 0)

        def update(self, n: float | None = 1) -> bool | None:
            self.done += int(n or 0)
            if self.done - self.told >= step or self.done == file.size:
                self.told = self.done
                report(PullProgress(status=status, digest=file.digest, total=file.size, completed=self.done))
            return None

    report(PullProgress(status=status, digest=file.digest, total=file.size, completed=0))
    target = into / file.path
    if not (target.is_file() and _matches(target, file)):
        target.unlink(missing_ok=True)  # not what the listing says: never taken as downloaded
        path = _hub_call(name, lambda: hf_hub_download(name.repo, file.path, revision=commit, local_dir=into,
                                                        endpoint=endpoint(), tqdm_class=Bar))  # fmt: skip
        target = Path(path)
        if not _matches(target, file):
            target.unlink(missing_ok=True)
            raise PrepareError(f"digest mismatch: {file.path} of {name.display} did not download as the repository "
                               f"lists it ({file.digest[:19]}…); the file was deleted — pull again (if it happens "
                               "again, the endpoint or a proxy between serves other bytes)")  # fmt: skip
    report(PullProgress(status=status, digest=file.digest, total=file.size, completed=file.size))
    return target


def _matches(path: Path, file: RepoFile) -> bool:
    """Whether ``path`` holds ``file``: its LFS sha256, else its git blob id."""
    size = path.stat().st_size
    if size != file.size:
        return False
    digest = hashlib.sha256() if file.sha256 else hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    expected = file.sha256 or file.blob_id
    return not expected or digest.hexdigest() == expected.lower()


def check_disk(name: HfName, files: list[RepoFile], at: Path, have: Path | None = None) -> None:
    needed = sum(f.size for f in files if have is None or not _complete(have / f.path, f))
    at.mkdir(parents=True, exist_ok=True)
    problems = check_resources(disk_needed=needed + DISK_MARGIN, disk_at=at, memory_needed=0,
                               what=f"pulling {name.display} ({human_bytes(needed)} left to fetch)")  # fmt: skip
    if problems:
        raise PrepareError(problems[0].replace(" while it builds", ""))


def _complete(path: Path, file: RepoFile) -> bool:
    try:
        return path.stat().st_size == file.size
    except OSError:
        return False


# -- the two kinds ------------------------------------------------------------------------


def pull_folder(name: HfName, provider: str, report: Report, home: Path | None = None) -> Build:
    """The onnxruntime-genai folder of ``name`` for ``provider`` as a build named
    ``name.display`` (an intact build of the same commit and folder is reused)."""
    found = listing(name)
    folders = genai_folders(found.files)[:MAX_FOLDERS]
    stage = staging_dir(name, found.commit, home)
    providers: dict[str, str] = {}
    for folder in folders:
        config = next(f for f in folder_files(found.files, folder) if posixpath.basename(f.path) == GENAI_CONFIG)
        if config.size > MAX_CONFIG:
            raise PrepareError(f"pull {name.display}: {config.path} is {human_bytes(config.size)}; not a genai_config.json")
        providers[folder] = provider_of(download(name, found.commit, config, stage, lambda _: None).read_bytes())
    folder, note = choose_folder(name, found.files, provider, providers)
    report(PullProgress(status=note))
    key = f"hf:{name.repo}@{found.commit}/{folder}"
    existing = catalogue.with_key(key, home)
    if existing is not None:
        report(PullProgress(status=f"already pulled as {existing.id}"))
        return catalogue.add_name(existing, name.display)
    files = sorted(folder_files(found.files, folder), key=lambda f: (f.size, f.path))  # a bad small file stops it early
    check_disk(name, files, models_dir(home), stage)
    for file in files:
        download(name, found.commit, file, stage, report)
    report(PullProgress(status="verifying sha256 digest"))  # each file was, as it arrived
    return _into_catalogue(name, folder, found.commit, provider, stage, files, key, home)


def _into_catalogue(
    name: HfName, folder: str, commit: str, provider: str, stage: Path, files: list[RepoFile], key: str, home: Path | None
) -> Build:
    """The downloaded folder, with its marker, renamed to a folder of the catalogue."""
    source = stage / folder
    config = json.loads((source / GENAI_CONFIG).read_text(encoding="utf-8"))
    tokens = slug(posixpath.basename(folder)).split("-")
    hashes = {f.path: f.sha256 for f in files if f.sha256}
    listed = {
        posixpath.basename(f.path): {"size": f.size, "sha256": hashes.get(f.path) or sha256_file(stage / f.path)}
        for f in files
    }
    record = BuildRecord(
        files=listed,
        name=name.display, model=name.repo, provider=provider, key=key,
        source=SourceInfo(kind="huggingface", ref=name.display, path=f"{name.repo}/{folder}".rstrip("/"), sha256=commit),
        precision=next((t for t in tokens if t in ("int4", "int8", "fp16", "fp32", "bf16")), ""),
        builder="none: pulled prebuilt", template="the repository's tokenizer_config.json",
        context_length=(config.get("model") or {}).get("context_length"),
    )  # fmt: skip
    shutil.rmtree(source / ".cache", ignore_errors=True)  # huggingface_hub's notes, when the folder is the top
    catalogue.write_record(source, record, hash_files=False)
    base = slug(name.repo.split("/")[1]) + (f"-{slug(posixpath.basename(folder))}" if folder else f"-{provider}")
    target = models_dir(home) / base
    number = 1
    while target.exists():  # another commit or folder under that name: kept, this one beside it
        number += 1
        target = models_dir(home) / f"{base}-{number}"
    os.replace(source, target)
    shutil.rmtree(stage, ignore_errors=True)
    return Build(target.name, target, record)


def gguf_dir(name: HfName, home: Path | None = None) -> Path:
    return (home or dragoman_home()) / "huggingface" / name.repo


def pull_gguf(name: HfName, report: Report, home: Path | None = None) -> tuple[Path, RepoFile]:
    """The GGUF file ``name`` names, in :func:`gguf_dir` (an intact copy is not fetched
    again), and what the listing says of it."""
    found = listing(name)
    file = next((f for f in found.files if f.path == name.path), None)
    if file is None:
        ggufs = [f.path for f in found.files if f.path.lower().endswith(".gguf")]
        raise PrepareError(f"pull {name.display}: the repository has no file {name.path}; its GGUF files: "
                           f"{', '.join(ggufs[:20]) or 'none'}")  # fmt: skip
    into = gguf_dir(name, home)
    check_disk(name, [file], into, into)
    path = download(name, found.commit, file, into, report)
    report(PullProgress(status="verifying sha256 digest"))
    return path, file


__all__ = ["Listing", "RepoFile", "choose_folder", "listing", "provider_of", "pull_folder", "pull_gguf"]
