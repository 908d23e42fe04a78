"""The two upstream dialects: an OpenAI-compatible server and an Ollama server.

Same-dialect pass-through goes through the canonical request too: it is validated on
the way in, the model name is rewritten, and every field the canonical model knows is
written back as the client sent it. Fields it does not know (``user``, ``metadata``,
``service_tier``, …) are not forwarded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import structlog

from dragoman.adapters import ollama, openai
from dragoman.adapters.canonical import ChatRequest, CompletionRequest, EmbedRequest, EmbedResult, Event
from dragoman.adapters.ollama import embed as ollama_embed
from dragoman.adapters.openai import embed as openai_embed
from dragoman.adapters.errors import DragomanError
from dragoman.adapters.ollama import generate
from dragoman.backends.base import Capabilities, ModelDetails
from dragoman.adapters.responses import upstream_reply as responses_reply
from dragoman.adapters.responses import upstream_request as responses_upstream
from dragoman.backends.upstream.backend import Call, HttpUpstreamBackend, StreamDecoder
from dragoman.backends.upstream.discovery import parse_ollama_tags, parse_openai_models
from dragoman.backends.upstream.settings import OpenAISettings
from dragoman.backends.upstream.tool_choice import require_tool_call

log = structlog.get_logger("dragoman.upstream")


class OpenAIBackend(HttpUpstreamBackend):
    """Any OpenAI-compatible server (vLLM, llama-server, hosted APIs); ``base_url``
    ends where the API's paths begin, usually in ``/v1``. ``api: responses`` sends chats
    to the server's ``/responses`` instead of ``/chat/completions``."""

    Settings = OpenAISettings
    chat_path = "/chat/completions"
    completion_path = "/completions"
    responses_path = "/responses"
    models_path = "/models"
    kind = "openai"

    def capabilities(self, model: str) -> Capabilities:
        # logit_bias goes to Chat Completions; the Responses API has no such field.
        responses = isinstance(self.settings, OpenAISettings) and self.settings.api == "responses"
        return msgspec.structs.replace(super().capabilities(model), logit_bias=not responses)

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        body, dropped = openai.to_upstream(request, model, extra_options=self.settings.extra_options)
        self._log_dropped(request.model, dropped)
        return body

    def completion_call(self, request: CompletionRequest, model: str) -> Call:
        """``/v1/completions`` sends the prompt as it is: right for a raw prompt or a
        suffix, wrong for a templated one, which is the chat it means."""
        if request.templated:
            return self.chat_call(request.as_chat(), model)
        body, dropped = openai.completion_to_upstream(request, model, extra_options=self.settings.extra_options)
        self._log_dropped(request.model, dropped)
        return Call(self.completion_path, body, self.decoder, self.parse_response)

    def chat_call(self, request: ChatRequest, model: str) -> Call:
        if self.settings.api != "responses":  # type: ignore[attr-defined]
            return super().chat_call(request, model)
        body, dropped = responses_upstream.to_upstream(request, model)
        self._log_dropped(request.model, dropped)
        return Call(self.responses_path, body, responses_reply.UpstreamStreamDecoder, responses_reply.parse_upstream_response)

    def _log_dropped(self, model: str, dropped: list[str]) -> None:
        if dropped:
            # Never remapped to a field of another meaning (repeat_penalty is not frequency_penalty).
            log.info(
                "sampling options without an OpenAI field were dropped (extra_options: true sends them)",
                model=model,
                dropped=dropped,
            )

    def decoder(self) -> StreamDecoder:
        return openai.UpstreamStreamDecoder()

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        return openai.parse_upstream_error(status, body)

    def parse_response(self, body: bytes) -> list[Event]:
        return openai.parse_upstream_response(body)

    def parse_models(self, body: bytes) -> dict[str, ModelDetails]:
        return parse_openai_models(body)

    def encode_embed(self, request: EmbedRequest, model: str) -> tuple[str, bytes]:
        return "/embeddings", openai_embed.embeddings_to_upstream(request, model)

    def parse_embed(self, body: bytes, expected: int) -> EmbedResult:
        return openai_embed.parse_upstream_embeddings(body, expected)


class OllamaBackend(HttpUpstreamBackend):
    """An Ollama server; ``base_url`` is its root (``http://host:11434``)."""

    chat_path = "/api/chat"
    completion_path = "/api/generate"
    models_path = "/api/tags"
    kind = "ollama"

    def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        events = super().chat(request)
        if request.tools and request.tool_choice.mode in ("required", "function"):
            return require_tool_call(events, request.tool_choice, f"upstream {self._label()} (ollama)")
        return events

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        return ollama.to_upstream(request, model)

    def completion_call(self, request: CompletionRequest, model: str) -> Call:
        """Every kind goes to ``/api/generate``, which templates, takes raw prompts
        and renders a suffix with the model's own FIM template."""
        return Call(
            self.completion_path,
            generate.to_upstream(request, model),
            generate.UpstreamGenerateDecoder,
            lambda body: ollama.parse_upstream_response(body, generate.UpstreamGenerateDecoder()),
        )

    def _without_memory(self, request: CompletionRequest) -> CompletionRequest:
        return request  # /api/generate takes the context back, as the client sent it

    def _label(self) -> str:
        return ", ".join(e.label for e in self.pool.endpoints)

    def decoder(self) -> StreamDecoder:
        return ollama.UpstreamStreamDecoder()

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        return ollama.parse_upstream_error(status, body)

    def parse_response(self, body: bytes) -> list[Event]:
        return ollama.parse_upstream_response(body)

    def parse_models(self, body: bytes) -> dict[str, ModelDetails]:
        return parse_ollama_tags(body)

    def encode_embed(self, request: EmbedRequest, model: str) -> tuple[str, bytes]:
        return ollama_embed.embed_to_upstream(request, model)

    def parse_embed(self, body: bytes, expected: int) -> EmbedResult:
        return ollama_embed.parse_upstream_embed(body, expected)

    async def load(self, model: str, keep_alive: float | None) -> None:
        """Ollama's own contract: a chat with no messages loads (keep_alive 0: unloads)."""
        async for _ in self.chat(ChatRequest(model=model, messages=[], keep_alive=keep_alive)):
            pass

    async def unload(self, model: str) -> None:
        await self.load(model, 0.0)


__all__ = ["OllamaBackend", "OpenAIBackend"]
