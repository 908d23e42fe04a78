"""Ollama-dialect routes: ``/api/chat`` and the discovery endpoints clients probe."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from litestar import MediaType, Request, Response, Router, get, head, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from dragoman.adapters import ollama
from dragoman.adapters.canonical import SamplingOptions
from dragoman.adapters.ollama.wire import GoRequest, TagDetails
from dragoman.adapters.errors import RequestError
from dragoman.backends.base import Backend, EmbeddingLength, LoadedModel, ModelDetails
from dragoman.config import ModelRoute
from dragoman.proxy.chat import answer, start_chat
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import OLLAMA_CHAT, OLLAMA_SHOW
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.record import RequestRecord
from dragoman.proxy.version import OLLAMA_API_VERSION, __version__


class TagModel(msgspec.Struct):
    name: str
    model: str
    modified_at: dt.datetime
    size: int
    digest: str
    details: TagDetails


class TagList(msgspec.Struct):
    models: list[TagModel]


class RunningDetails(TagDetails):
    """``details`` in ``/api/ps``, plus what runs a local model (Ollama's clients skip
    fields they do not know): its engine, and why when it is not the one dragoman
    would choose first. None for a backend without engines (an upstream)."""

    engine: str | None = None
    engine_reason: str | None = None


class RunningModel(msgspec.Struct):
    name: str
    model: str
    size: int
    digest: str
    details: RunningDetails
    expires_at: dt.datetime
    size_vram: int
    context_length: int | None = None


class RunningList(msgspec.Struct):
    models: list[RunningModel]


class ShowRequest(GoRequest):
    model: str | None = None
    name: str | None = None  # older clients send "name"
    verbose: bool | None = False


class ShowResponse(msgspec.Struct):
    modelfile: str
    parameters: str
    template: str
    details: TagDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: dt.datetime
    license: str = ""


class VersionResponse(msgspec.Struct):
    version: str
    dragoman: str


@post("/api/chat", status_code=200, summary="Generate a chat completion", tags=["Ollama"], responses=OLLAMA_CHAT)
async def chat(
    request: Request[Any, Any, Any],
    data: JSONBody[ollama.ChatRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes] | Stream:
    check_message_count(len(data.messages or ()), models.limits)
    canonical = ollama.to_canonical(data)
    if not canonical.messages:
        return await load_or_unload(models, canonical.model, canonical.keep_alive, ollama.render_load_response)
    chat = await start_chat(models, canonical, record, authorization=credential.authorization)
    return await answer(chat, ollama.reply_for(data), record, request.receive)


async def load_or_unload(
    models: ModelTable, name: str, keep_alive: float | None, render: Callable[[str, Literal["load", "unload"]], bytes]
) -> Response[bytes]:
    """Ollama's contract for empty ``messages`` (``/api/chat``) or an empty ``prompt``
    (``/api/generate``): load the model, or unload it with keep_alive 0."""
    _, backend = models.lookup(name)
    if keep_alive == 0:
        await backend.unload(name)
        body = render(name, "unload")
    else:
        await backend.load(name, keep_alive)
        body = render(name, "load")
    return Response(body, media_type="application/json")


@get("/api/tags", summary="List models", tags=["Ollama"])
async def tags(models: NamedDependency[ModelTable]) -> TagList:
    listed = await models.listed_names()
    return TagList(models=[_tag(name, route, backend, models.started) for name, route, backend in listed])


@post("/api/show", status_code=200, summary="Show model details", tags=["Ollama"], responses=OLLAMA_SHOW)
async def show(data: JSONBody[ShowRequest], models: NamedDependency[ModelTable]) -> ShowResponse:
    name = data.model or data.name
    if not name:
        raise RequestError("model: field required", param="model")
    route, backend = models.lookup(name)
    details = backend.details(name)
    return ShowResponse(
        modelfile=f"# served by dragoman through the '{route.config.backend}' backend\nFROM {name}\n",
        parameters=show_parameters(details.context_length, route.config.defaults, details.end_tokens),
        template=details.insert_template + details.template,
        details=_tag_details(details),
        model_info=model_info(name, details, _embedding_length(backend)),
        capabilities=backend.capabilities(name).names(),
        modified_at=models.started,
    )


def show_parameters(context_length: int | None, defaults: SamplingOptions, end_tokens: list[str]) -> str:
    """``parameters`` as Ollama prints them: ``num_ctx`` first (clients size their
    prompts by it), one ``stop "…"`` line per stop string (the entry's, else the model's
    end tokens, as a Modelfile's own stops replace the ones it inherits), then the other
    defaults; keys padded to 30, values as Go's ``%#v`` (strings quoted)."""
    lines: list[tuple[str, object]] = [] if context_length is None else [("num_ctx", context_length)]
    lines += [("stop", stop) for stop in defaults.stop or end_tokens]
    lines += [(k, v) for k, v in msgspec.to_builtins(defaults).items() if k not in ("stop", "num_ctx" if lines else "")]
    return "\n".join(f"{key:<30} {_go_value(value)}" for key, value in lines)


def model_info(name: str, details: ModelDetails, embedding_length: int | None = None) -> dict[str, Any]:
    """GGUF-style keys clients read: VS Code reads ``<arch>.context_length`` and
    ``general.basename``, LlamaIndex the context length, others the parameter count.
    ``embedding_length`` (an embedding model's vector size) wins over the details'."""
    arch = details.family or "model"
    info: dict[str, Any] = {"general.architecture": arch, "general.basename": name}
    if details.parameter_count:
        info["general.parameter_count"] = details.parameter_count
    if details.context_length:
        info[f"{arch}.context_length"] = details.context_length
    if embedding_length or details.embedding_length:
        info[f"{arch}.embedding_length"] = embedding_length or details.embedding_length
    return info


def _embedding_length(backend: Backend) -> int | None:
    return backend.embedding_length() if isinstance(backend, EmbeddingLength) else None


@get("/api/ps", summary="List loaded models", tags=["Ollama"])
async def ps(models: NamedDependency[ModelTable]) -> RunningList:
    running = [_running(loaded, route) for route, backend in models.entries() for loaded in backend.loaded()]
    return RunningList(models=running)


@get("/api/version", summary="Version", tags=["Ollama"])
async def version() -> VersionResponse:
    return VersionResponse(version=OLLAMA_API_VERSION, dragoman=__version__)


@get("/", media_type=MediaType.TEXT, include_in_schema=False)
async def root() -> str:
    return "Ollama is running"


@head("/", media_type=MediaType.TEXT, include_in_schema=False)
async def root_head() -> None:
    return None


def _tag(name: str, route: ModelRoute, backend: Backend, modified: dt.datetime) -> TagModel:
    details = backend.details(name)
    return TagModel(
        name=name,
        model=name,
        modified_at=modified,
        size=details.size,
        digest=_digest(name, route),
        details=_tag_details(details),
    )


def _running(loaded: LoadedModel, route: ModelRoute) -> RunningModel:
    forever = dt.datetime(2318, 1, 1, tzinfo=dt.timezone.utc)  # what Ollama shows for "never"
    return RunningModel(
        name=loaded.name,
        model=loaded.name,
        size=loaded.size,
        digest=_digest(loaded.name, route),
        details=_running_details(loaded),
        expires_at=loaded.expires_at or forever,
        size_vram=loaded.size_vram,
        context_length=loaded.context_length,
    )


def _tag_details(details: ModelDetails) -> TagDetails:
    return TagDetails(
        format=details.format,
        family=details.family,
        families=details.families or ([details.family] if details.family else None),
        parameter_size=details.parameter_size,
        quantization_level=details.quantization_level,
    )


def _running_details(loaded: LoadedModel) -> RunningDetails:
    engine = loaded.engine
    return RunningDetails(
        **msgspec.structs.asdict(_tag_details(loaded.details)),
        engine=engine.name if engine is not None else None,
        engine_reason=engine.reason if engine is not None else None,
    )


def _digest(name: str, route: ModelRoute) -> str:
    """Stable per name and backend; clients use it only to tell models apart."""
    return hashlib.sha256(f"{route.config.backend}:{name}".encode()).hexdigest()


def _go_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return repr(value).removesuffix(".0")  # Go prints 1.0 as 1
    return str(value).lower() if isinstance(value, bool) else str(value)


ollama_router = Router(path="/", route_handlers=[chat, tags, show, ps, version, root, root_head])
