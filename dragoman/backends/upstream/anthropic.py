"""An Anthropic-compatible server upstream (``backend: anthropic``): Anthropic itself, or
any server that speaks Messages (another dragoman, LiteLLM, …). ``base_url`` is the
server's root (``https://api.anthropic.com``); the key goes as ``x-api-key``."""

from __future__ import annotations

import msgspec
import structlog

from dragoman.adapters.anthropic import upstream_reply
from dragoman.adapters.anthropic.upstream_request import to_upstream
from dragoman.adapters.canonical import ChatRequest, CompletionRequest, Event, Secret
from dragoman.adapters.errors import BackendError, DragomanError, UnsupportedFeature
from dragoman.adapters.upstream_json import Unreadable, read_json
from dragoman.backends.base import Capabilities, ModelDetails
from dragoman.backends.upstream.backend import Call, HttpUpstreamBackend, StreamDecoder
from dragoman.backends.upstream.discovery import parse_openai_models
from dragoman.backends.upstream.settings import AnthropicSettings

log = structlog.get_logger("dragoman.upstream")

COUNT_PATH = "/v1/messages/count_tokens"


class _Count(msgspec.Struct):
    input_tokens: int


_count_decoder = msgspec.json.Decoder(_Count)


class AnthropicBackend(HttpUpstreamBackend):
    Settings = AnthropicSettings
    chat_path = "/v1/messages"
    models_path = "/v1/models"
    kind = "anthropic"

    @property
    def _settings(self) -> AnthropicSettings:
        return self.settings  # type: ignore[return-value]

    def capabilities(self, model: str) -> Capabilities:
        # Anthropic has no logprobs and no embeddings: refused before the request.
        return Capabilities(tools=True, vision=True, thinking=True, json_schema=True, logprobs=False, embedding=False)

    def dialect_headers(self) -> dict[str, str]:
        return {"anthropic-version": self._settings.anthropic_version}

    def auth_headers(self, authorization: Secret) -> dict[str, str]:
        scheme, _, token = authorization.partition(" ")
        return {"x-api-key": Secret(token.strip() if scheme.lower() == "bearer" else authorization)}

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        body, dropped = to_upstream(request, model, default_max_tokens=self._settings.max_tokens)
        if dropped:
            log.info("sampling options without an Anthropic field were dropped", model=request.model, dropped=dropped)
        return body

    def completion_call(self, request: CompletionRequest, model: str) -> Call:
        if not request.templated:
            what = "raw prompts" if request.raw else "fill-in-the-middle (suffix)"
            raise UnsupportedFeature(f"{what}: an Anthropic upstream has only Messages; send a templated prompt", param="raw" if request.raw else "suffix")
        return self.chat_call(request.as_chat(), model)

    def decoder(self) -> StreamDecoder:
        return upstream_reply.UpstreamStreamDecoder()

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        return upstream_reply.parse_upstream_error(status, body)

    def parse_response(self, body: bytes) -> list[Event]:
        return upstream_reply.parse_upstream_response(body)

    def parse_models(self, body: bytes) -> dict[str, ModelDetails]:
        return parse_openai_models(body, kind="anthropic")  # the same {"data": [{"id"}]} listing

    async def count_tokens(self, request: ChatRequest) -> int:
        """Anthropic's own count, asked of the upstream."""
        model = self.settings.model or request.model
        body, _ = to_upstream(request, model, default_max_tokens=self._settings.max_tokens, count=True)
        raw, endpoint = await self.endpoints.post_whole(COUNT_PATH, body, request)
        try:
            return read_json(_count_decoder.decode, raw).input_tokens
        except Unreadable as exc:
            raise BackendError(f"model '{request.model}': upstream {endpoint.label} sent a count {exc}") from None


__all__ = ["AnthropicBackend"]
