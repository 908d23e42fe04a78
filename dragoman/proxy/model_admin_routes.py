"""Ollama's model-management endpoints, as a gateway whose models come from a YAML file.

``/api/pull`` makes a served model ready, or pulls one from the registry and builds it (Home Assistant and Continue pull a model they
do not see listed; Open WebUI has a pull screen): progress lines in Ollama's shape, then
``{"status": "success"}``. ``/api/delete`` and ``/api/copy`` delete and name the models
dragoman built (:mod:`dragoman.backends.onnx.built_models`; what a config entry serves
is refused, naming the entry). ``/api/create``, ``/api/push`` and ``/api/blobs/:digest``
change what a server holds, which here is the config file's business: a 501 in Ollama's
error shape saying so, never a 404 that reads as "no such server".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import structlog
from litestar import Response, Router, delete, head, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.response import Stream

from dragoman.adapters.errors import DragomanError, ModelNotFound, RequestError
from dragoman.adapters.ollama import render_error
from dragoman.adapters.ollama.wire import GoRequest
from dragoman.backends.base import Backend
from dragoman.backends.onnx import built_models
from dragoman.backends.onnx.prepare.support import PrepareError
from dragoman.backends.pull import ProgressCallback, PullProgress, Pullable, buildable
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import OLLAMA_ADMIN, OLLAMA_DELETE_COPY, OLLAMA_PULL

log = structlog.get_logger("dragoman.pull")

_encoder = msgspec.json.Encoder()
_SUCCESS = PullProgress(status="success")


class PullRequest(GoRequest):
    model: str | None = None
    name: str | None = None  # older clients send "name"
    stream: bool | None = True
    insecure: bool | None = False  # accepted, meaningless here


class NotConfigured(DragomanError):
    status = 501


class BuildsOff(DragomanError):
    status = 403


class InUse(DragomanError):
    status = 409


class DeleteRequest(GoRequest):
    model: str | None = None
    name: str | None = None  # older clients send "name"


class CopyRequest(GoRequest):
    source: str
    destination: str


class NotServed(DragomanError):
    """A 404 with its own words (ModelNotFound would wrap them in "model '…' not found")."""

    status = 404


@post(
    "/api/pull",
    status_code=200,
    summary="Pull a model",
    description="Makes a served model ready (building the default model when it is not built), streaming "
    "Ollama's progress lines (`application/x-ndjson`) unless `stream` is false.",
    tags=["Ollama"],
    responses=OLLAMA_PULL,
)
async def pull(data: JSONBody[PullRequest], models: NamedDependency[ModelTable]) -> Response[bytes] | Stream:
    name = data.model or data.name
    if not name:
        raise RequestError("model: field required", param="model")
    make_ready = _pull_for(models, name)
    if not data.stream:
        await make_ready(lambda _: None)
        return Response(_encoder.encode(_SUCCESS), media_type="application/json")
    return Stream(_progress_lines(make_ready, name), media_type="application/x-ndjson")


def _pull_for(models: ModelTable, name: str) -> Callable[[ProgressCallback], Awaitable[None]]:
    """What a pull of ``name`` does: make the served model ready, or build what
    :func:`backends.pull.buildable` can build for a name the config does not serve."""
    try:
        _, backend = models.lookup(name)
    except ModelNotFound:
        try:
            build = buildable(name)
        except PrepareError as exc:  # a name that cannot be pulled: said before any request
            raise RequestError(f"model: {exc}", param="model") from None
        if build is None:
            # Not the config file's path: whoever asks need not learn the server's folders.
            registry = models.config.server.registry
            why = "it is not an Ollama model name to pull" if registry else "pulls from a registry are off (server.registry is empty)"
            raise NotServed(
                f"pull model manifest: model '{name}' is not served here: dragoman serves the models its config "
                f"file names, and {why}; add an entry for it (see docs/configuration.md) and "
                "restart, or pick one of GET /api/tags",
                param="model",
                code="model_not_found",
            ) from None
        if not models.config.server.pull_builds:
            raise BuildsOff(
                f"building '{name}' through /api/pull is turned off here (server.pull_builds: false); build it on "
                f"the server with: dragoman models prepare {name}",
                param="model",
                code="forbidden",
            )
        return build
    return lambda progress: _make_ready(backend, name, progress)


async def _make_ready(backend: Backend, name: str, progress: ProgressCallback) -> None:
    if isinstance(backend, Pullable):
        await backend.pull(name, progress)
    else:
        progress(PullProgress(status=f"{name} is served by {type(backend).__name__}; nothing to pull here"))


async def _progress_lines(make_ready: Callable[[ProgressCallback], Awaitable[None]], name: str) -> AsyncIterator[bytes]:
    """Ollama's lines: ``pulling manifest``, each step, ``success`` — or a last
    ``{"error": …}`` line. The work goes on if the client leaves: a build half done
    helps nobody, and the next request for the model needs it."""
    steps: asyncio.Queue[PullProgress | None] = asyncio.Queue()
    yield _line(PullProgress(status="pulling manifest"))
    work = asyncio.ensure_future(make_ready(steps.put_nowait))
    work.add_done_callback(lambda _: steps.put_nowait(None))
    while (step := await steps.get()) is not None:
        yield _line(step)
    try:
        work.result()
    except DragomanError as err:
        yield render_error(err) + b"\n"
        return
    except Exception as exc:  # a failing pull must end the stream; its details are for the log
        log.exception("pull failed", model=name)
        yield render_error(DragomanError(f"pull failed: an internal error ({type(exc).__name__}); the server log "
                                         "has the details")) + b"\n"  # fmt: skip
        return
    yield _line(_SUCCESS)


def _line(progress: PullProgress) -> bytes:
    return _encoder.encode(progress) + b"\n"


def _configured(action: str) -> NotConfigured:
    return NotConfigured(
        f"{action} is not done over the API here: dragoman serves the models its YAML config file names; "
        "edit that file (models: entries, aliases:) and restart",
        code="not_implemented",
    )


@delete(
    "/api/delete", status_code=200, summary="Delete a built model", tags=["Ollama"], responses=OLLAMA_DELETE_COPY,
    description="Removes a name of a model dragoman built (the build itself when no name is left); 409 while a "
    "config entry serves it or a worker has it loaded.",
)  # fmt: skip
async def delete_model(data: JSONBody[DeleteRequest], models: NamedDependency[ModelTable]) -> Response[bytes]:
    name = data.model or data.name
    if not name:
        raise RequestError("model: field required", param="model")
    done = await _built_models_call(lambda: built_models.delete(name, models.config), "model")
    log.info("model deleted", model=name, done=done)
    return Response(b"", media_type="application/json")


@post(
    "/api/copy", status_code=200, summary="Copy a built model", tags=["Ollama"], responses=OLLAMA_DELETE_COPY,
    description="Records `destination` as another name of the model dragoman built as `source` (a config entry's "
    "`model:` may then name it).",
)  # fmt: skip
async def copy_model(data: JSONBody[CopyRequest]) -> Response[bytes]:
    done = await _built_models_call(lambda: built_models.copy(data.source, data.destination), "source")
    log.info("model copied", source=data.source, destination=data.destination, done=done)
    return Response(b"", media_type="application/json")


async def _built_models_call(change: Callable[[], list[str]], param: str) -> list[str]:
    """A catalogue change, off the event loop (a folder of gigabytes is removed), its
    refusals in Ollama's error shape."""
    try:
        return await asyncio.to_thread(change)
    except built_models.NoSuchModel as exc:
        raise NotServed(str(exc.args[0]), param=param, code="model_not_found") from None
    except built_models.Refused as exc:
        if not exc.conflict:
            raise RequestError(exc.message, param=exc.field) from None
        raise InUse(exc.message, param=exc.field, code="conflict") from None


@post("/api/create", status_code=501, summary="Create a model (not here)", tags=["Ollama"], responses=OLLAMA_ADMIN)
async def create_model() -> None:
    raise _configured("creating a model")


@post("/api/push", status_code=501, summary="Push a model (not here)", tags=["Ollama"], responses=OLLAMA_ADMIN)
async def push_model() -> None:
    raise _configured("pushing a model")


@post("/api/blobs/{digest:str}", status_code=501, summary="Upload a blob (not here)", tags=["Ollama"], responses=OLLAMA_ADMIN)
async def create_blob(digest: FromPath[str]) -> None:
    raise _configured("uploading a blob")


@head("/api/blobs/{digest:str}", status_code=501, summary="Check a blob (not here)", tags=["Ollama"])
async def check_blob(digest: FromPath[str]) -> None:
    raise _configured("checking for a blob")


model_admin_router = Router(
    path="/",
    route_handlers=[pull, delete_model, copy_model, create_model, push_model, create_blob, check_blob],
)
