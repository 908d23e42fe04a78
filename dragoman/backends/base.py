"""The backend protocol: what the proxy needs from anything that answers chats.

One backend instance serves one model entry of the config (which may be a glob that
matches many names). Backends own their I/O and their models' lifetimes; the proxy
only calls :meth:`Backend.chat` and reads the rest for discovery endpoints. What a
backend may offer beyond :class:`Backend` is a runtime-checkable Protocol here, asked
with ``isinstance``: the proxy never probes attributes nor names a concrete backend.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import msgspec

from dragoman.adapters.canonical import ChatRequest, CompletionRequest, EmbedRequest, EmbedResult, Event, Request
from dragoman.adapters.errors import UnsupportedFeature
from dragoman.backends.admission import Admission

if TYPE_CHECKING:
    from dragoman.config import ModelRoute


class Capabilities(msgspec.Struct, frozen=True):
    tools: bool = False
    vision: bool = False
    thinking: bool = False
    json_schema: bool = False
    logprobs: bool = False
    insert: bool = False  # fill-in-the-middle: a completion with a suffix
    embedding: bool = False
    completion: bool = True  # generates text (an embedding-only model does not)
    logit_bias: bool = False  # biases token ids' logits (OpenAI's logit_bias)
    prompt_progress: bool = False  # reports how far a prompt has been read (PromptProgress)

    def names(self) -> list[str]:
        """Ollama's ``capabilities`` list for ``/api/show``, in Ollama's order."""
        order = ("completion", "tools", "insert", "thinking", "vision", "embedding")
        return [n for n in order if getattr(self, n)]


class ModelDetails(msgspec.Struct, frozen=True):
    """What ``/api/tags`` and ``/api/show`` report about a model."""

    format: str = ""
    family: str = ""
    families: list[str] | None = None
    parameter_size: str = ""
    quantization_level: str = ""
    size: int = 0
    context_length: int | None = None
    template: str = ""
    parameter_count: int | None = None  # /api/show's general.parameter_count
    embedding_length: int | None = None  # the hidden size: /api/show's <arch>.embedding_length
    # The model's fill-in-the-middle frame as a Go template with {{ .Suffix }}, for
    # /api/show: Continue turns FIM on when the template mentions .Suffix.
    insert_template: str = ""
    # The texts of the model's end-of-generation tokens (ChatML's <|im_end|>): /api/show
    # lists them as `stop` parameters when the entry configures none, as Ollama's library
    # Modelfiles do, and Continue sends them back as stop strings.
    end_tokens: list[str] = []


class Engine(msgspec.Struct, frozen=True):
    """What runs a loaded local model's generations (the ONNX backend: ``batch`` or
    ``generator``), and ``reason``, why, when it is not the engine the backend would
    choose first ("" when it is)."""

    name: str
    reason: str = ""


class LoadedModel(msgspec.Struct, frozen=True):
    """One entry of ``/api/ps``."""

    name: str
    size: int = 0
    size_vram: int = 0
    expires_at: dt.datetime | None = None  # None = never
    context_length: int | None = None
    details: ModelDetails = ModelDetails()
    engine: Engine | None = None  # None: the backend has no engines to choose between


@runtime_checkable
class Backend(Protocol):
    """What every backend provides. ``Settings`` is a ``msgspec.Struct`` decoded from
    the model entry's backend-specific keys (strictly: unknown keys are errors)."""

    Settings: ClassVar[type[msgspec.Struct]]

    def capabilities(self, model: str) -> Capabilities: ...

    def details(self, model: str) -> ModelDetails: ...

    def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        """Events of one reply. Raising a ``DragomanError`` before the first event is
        a clean HTTP error; after it, yield an ``ErrorEvent`` instead. Cancelling the
        iterator (client gone) must stop the work."""
        ...

    def complete(self, request: CompletionRequest) -> AsyncIterator[Event]:
        """Events of one completion, with :meth:`chat`'s contract. A templated request
        is :meth:`CompletionRequest.as_chat`; a raw or suffixed one is the backend's to
        render (or, for an upstream, to send to its completion endpoint)."""
        ...

    async def load(self, model: str, keep_alive: float | None) -> None: ...

    async def unload(self, model: str) -> None: ...

    def loaded(self) -> list[LoadedModel]: ...

    async def list_models(self) -> list[str]:
        """Names this backend serves beyond its configured name (discovery); may be []."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    """What a backend adds to answer embedding requests (``Capabilities.embedding``)."""

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        """Vectors for ``request.inputs`` in order, as the model gives them (the proxy
        applies ``dimensions`` and normalisation). Raises a ``DragomanError``."""
        ...


# Optional capabilities: a backend offers one by having its method (or attribute); the
# proxy asks with ``isinstance(backend, Protocol)``, and a backend without it refuses the
# feature (count_tokens) or is taken to be fine without it (ready, the gauges).


@runtime_checkable
class TokenCounter(Protocol):
    """Anthropic's count_tokens: the prompt's length in the model's own tokens."""

    async def count_tokens(self, request: ChatRequest) -> int: ...


@runtime_checkable
class ReadinessProbe(Protocol):
    """For /health/ready: ``(ok, detail)``; a backend without one is ready."""

    async def ready(self) -> tuple[bool, str]: ...


@runtime_checkable
class Relay(Protocol):
    """A backend whose models run on upstream servers: nothing loads in this process (so
    any number of server workers), its work is bounded by its connections (the proxy
    gates and counts nothing of its own for it), and /metrics shows each endpoint's
    health."""

    def endpoint_health(self) -> dict[str, bool]: ...


@runtime_checkable
class Queued(Protocol):
    """A backend that keeps its own admission queue: /metrics shows its queue depth and
    running requests when the proxy has no gate of its own for the entry."""

    @property
    def admission(self) -> Admission: ...


@runtime_checkable
class EmbeddingLength(Protocol):
    """The model's hidden size as it stands on disk now, for /api/show (None: unknown)."""

    def embedding_length(self) -> int | None: ...


# What a backend *class* may offer (the registry hands out classes).


@runtime_checkable
class Preflight(Protocol):
    """Problems a backend can see before the server starts (None: none)."""

    def preflight(self, settings: Any) -> str | None: ...


@runtime_checkable
class RouteFactory(Protocol):
    """A class that chooses the backend for an entry (onnx: ``task: embed`` entries get
    the embedding backend); a class without it is constructed with the route."""

    def for_route(self, route: ModelRoute) -> Backend: ...


def build_backend(cls: Any, route: ModelRoute) -> Backend:
    """The backend instance for ``route`` from its registered class."""
    backend: Backend = cls.for_route(route) if isinstance(cls, RouteFactory) else cls(route)
    return backend


def loads_models(cls: type) -> bool:
    """Whether a backend class holds models in the server's processes."""
    return not issubclass(cls, Relay)


def check_capabilities(request: Request, caps: Capabilities, model: str) -> None:
    """Refuse, naming the feature, what the backend cannot do (400, never a silent drop)."""
    if not caps.completion:
        raise UnsupportedFeature(f"model '{model}' does not support generate (it is an embedding model)", param="model")
    if isinstance(request, ChatRequest):
        if request.tools and request.tool_choice.mode != "none" and not caps.tools:
            raise UnsupportedFeature(f"model '{model}' does not support tools", param="tools")
        if any(m.images for m in request.messages) and not caps.vision:
            raise UnsupportedFeature(f"model '{model}' does not support images", param="messages")
    else:
        if request.suffix is not None and not caps.insert:
            message = f"model '{model}' does not support insert (its tokenizer has no fill-in-the-middle tokens)"
            raise UnsupportedFeature(message, param="suffix")
        if request.images and not caps.vision:
            raise UnsupportedFeature(f"model '{model}' does not support images", param="images")
    if request.think and not caps.thinking:
        raise UnsupportedFeature(f"model '{model}' does not support thinking", param="think")
    if request.response_format.type != "text" and not caps.json_schema:
        raise UnsupportedFeature(
            f"model '{model}' does not support structured output", param="response_format"
        )
    if request.logprobs and not caps.logprobs:
        raise UnsupportedFeature(f"model '{model}' does not support logprobs", param="logprobs")
    if request.return_progress and not caps.prompt_progress:
        message = f"return_progress: model '{model}' does not report how far it has read a prompt; omit return_progress"
        raise UnsupportedFeature(message, param="return_progress")
    if request.logit_bias and not caps.logit_bias:
        message = f"logit_bias: model '{model}' cannot bias token ids (its backend has no such knob); omit logit_bias"
        raise UnsupportedFeature(message, param="logit_bias")
