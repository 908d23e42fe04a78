"""Backends that forward to other chat servers over HTTP: OpenAI-compatible servers (Chat
Completions or Responses), Ollama servers and Anthropic-compatible servers, each model entry
on one or several endpoints."""

from __future__ import annotations

from dragoman.backends.upstream.anthropic import AnthropicBackend
from dragoman.backends.upstream.backend import HttpUpstreamBackend
from dragoman.backends.upstream.dialects import OllamaBackend, OpenAIBackend
from dragoman.backends.upstream.endpoints import Endpoint, EndpointPool
from dragoman.backends.upstream.settings import UpstreamSettings

__all__ = ["AnthropicBackend", "Endpoint", "EndpointPool", "HttpUpstreamBackend", "OllamaBackend", "OpenAIBackend", "UpstreamSettings"]
