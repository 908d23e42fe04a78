"""Backends that forward to other chat servers over HTTP: OpenAI-compatible servers (Chat
Completions or Responses), Ollama servers and Anthropic-compatible servers, each model entry
on one or several endpoints."""

from __future__ import annotations

from backends.upstream.anthropic import AnthropicBackend
from backends.upstream.backend import HttpUpstreamBackend
from backends.upstream.dialects import OllamaBackend, OpenAIBackend
from backends.upstream.endpoints import Endpoint, EndpointPool
from backends.upstream.settings import UpstreamSettings

__all__ = ["AnthropicBackend", "Endpoint", "EndpointPool", "HttpUpstreamBackend", "OllamaBackend", "OpenAIBackend", "UpstreamSettings"]
