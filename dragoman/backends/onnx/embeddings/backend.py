"""``onnx`` entries with ``task: embed``: an embedding model and nothing else.

They answer ``/api/embed``, ``/api/embeddings`` and ``/v1/embeddings``; asked to chat
they answer a 400 naming the endpoints that work (``Capabilities.completion`` is false).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from dragoman.adapters.canonical import ChatRequest, CompletionRequest, EmbedRequest, EmbedResult, Event
from dragoman.adapters.errors import UnsupportedFeature
from dragoman.backends.base import Capabilities, LoadedModel, ModelDetails
from dragoman.backends.onnx.embeddings.service import OnnxEmbedder
from dragoman.backends.onnx.providers import flavour_problem
from dragoman.backends.onnx.settings import OnnxSettings


class OnnxEmbeddingBackend:
    Settings: ClassVar[type[msgspec.Struct]] = OnnxSettings

    def __init__(self, route: Any) -> None:
        from dragoman.backends.onnx.embeddings.build import default_embedding_path

        self.route = route
        self.settings: OnnxSettings = route.settings
        self.name: str = route.config.name
        folder = Path(self.settings.path).expanduser() if self.settings.path else default_embedding_path()
        self.embedder = OnnxEmbedder(self.name, self.settings, folder, route.keep_alive, route.config.context_length)

    @staticmethod
    def preflight(settings: OnnxSettings) -> str | None:
        return flavour_problem(settings.provider)

    def capabilities(self, model: str) -> Capabilities:
        return Capabilities(completion=False, embedding=True)

    def details(self, model: str) -> ModelDetails:
        return self.embedder.details()

    def embedding_length(self) -> int | None:
        facts = self.embedder.facts()
        return facts.dimensions if facts else None

    async def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        raise UnsupportedFeature(
            f"model '{request.model}' is an embedding model and cannot chat; send it to /api/embed or /v1/embeddings",
            param="model",
        )
        yield  # pragma: no cover  (makes this an async generator)

    async def complete(self, request: CompletionRequest) -> AsyncIterator[Event]:
        raise UnsupportedFeature(
            f"model '{request.model}' is an embedding model and cannot generate; send it to /api/embed or "
            "/v1/embeddings",
            param="model",
        )
        yield  # pragma: no cover  (makes this an async generator)

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        return await self.embedder.embed(request)

    async def load(self, model: str, keep_alive: float | None) -> None:
        await self.embedder.load(keep_alive)

    async def unload(self, model: str | None = None) -> None:
        await self.embedder.unload()

    def loaded(self) -> list[LoadedModel]:
        return self.embedder.loaded()

    async def list_models(self) -> list[str]:
        return []

    async def ready(self) -> tuple[bool, str]:
        from dragoman.backends.onnx.embeddings.build import default_model_at, is_prepared

        folder = self.embedder.folder
        if self.embedder.loaded_provider is not None:
            return True, "loaded"
        if is_prepared(folder) or (folder / "model.onnx").is_file():
            return True, f"not loaded; loads from {folder} on first use"
        model = default_model_at(folder)
        if model is not None and self.settings.prepare:
            return True, f"not built yet; {model} is built on first use"
        return False, f"{folder} holds no model.onnx" + (f"; run: dragoman models prepare {model}" if model else "")

    async def aclose(self) -> None:
        await self.embedder.close()
