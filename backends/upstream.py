"""Backends that forward to another chat server over HTTP (httpx).

The upstream is always asked to stream, whatever the client asked: one path, and a
non-streaming client reply is the aggregate of the same events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar, Protocol

import httpx
import msgspec
import structlog

from adapters import ollama, openai
from adapters.canonical import ChatRequest, Event
from adapters.errors import BackendError, BackendTimeout, DragomanError
from backends.base import Capabilities, LoadedModel, ModelDetails
from config import ModelRoute

log = structlog.get_logger("dragoman.upstream")


class UpstreamSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    base_url: str
    model: str | None = None  # the upstream's name; default: the name the client asked for
    api_key: str | None = None
    timeout: float = 600.0  # seconds for the whole request
    connect_timeout: float = 10.0


class StreamDecoder(Protocol):
    def feed(self, line: bytes) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


class HttpUpstreamBackend:
    """Shared by the OpenAI and Ollama upstream backends; subclasses name the dialect."""

    Settings: ClassVar[type[UpstreamSettings]] = UpstreamSettings
    chat_path: ClassVar[str]
    kind: ClassVar[str]

    def __init__(self, route: ModelRoute) -> None:
        self.route = route
        self.settings: UpstreamSettings = route.settings  # type: ignore[assignment]
        headers = {"Authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.settings.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(self.settings.timeout, connect=self.settings.connect_timeout),
        )

    # -- dialect hooks ------------------------------------------------------------------

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        raise NotImplementedError

    def decoder(self) -> StreamDecoder:
        raise NotImplementedError

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        raise NotImplementedError

    # -- Backend protocol -----------------------------------------------------------------

    def capabilities(self, model: str) -> Capabilities:
        # The upstream decides what it can do and says so in its own error.
        return Capabilities(tools=True, vision=True, thinking=True, json_schema=True, logprobs=True)

    def details(self, model: str) -> ModelDetails:
        return ModelDetails(format=self.kind, family="remote")

    async def load(self, model: str, keep_alive: float | None) -> None:
        return None

    async def unload(self, model: str) -> None:
        return None

    def loaded(self) -> list[LoadedModel]:
        return []

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        await self._client.aclose()

    async def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        model = self.settings.model or request.model
        body = self.encode_request(msgspec.structs.replace(request, stream=True), model)
        url = self.settings.base_url.rstrip("/") + self.chat_path
        try:
            async with self._client.stream(
                "POST", self.chat_path, content=body, headers={"Content-Type": "application/json"}
            ) as response:
                if response.status_code >= 400:
                    raise self.decode_error(response.status_code, await response.aread())
                decoder = self.decoder()
                async for line in response.aiter_lines():
                    for event in decoder.feed(line.encode()):
                        yield event
                for event in decoder.finish():
                    yield event
        except httpx.TimeoutException as exc:
            raise BackendTimeout(f"model '{request.model}': upstream {url} timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise BackendError(f"model '{request.model}': upstream {url} unreachable: {exc}") from exc


class OpenAIBackend(HttpUpstreamBackend):
    """Any OpenAI-compatible server (vLLM, llama-server, hosted APIs)."""

    chat_path = "/chat/completions"
    kind = "openai"

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        body, dropped = openai.to_upstream(request, model)
        if dropped:
            log.info("options without an OpenAI field were dropped", model=request.model, dropped=dropped)
        return body

    def decoder(self) -> StreamDecoder:
        return openai.UpstreamStreamDecoder()

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        return openai.parse_upstream_error(status, body)


class OllamaBackend(HttpUpstreamBackend):
    """An Ollama server."""

    chat_path = "/api/chat"
    kind = "ollama"

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        return ollama.to_upstream(request, model)

    def decoder(self) -> StreamDecoder:
        return ollama.UpstreamStreamDecoder()

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        return ollama.parse_upstream_error(status, body)

