"""Versions reported to clients."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dragoman")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

# Ollama clients gate features on /api/version (tools, thinking); report an API level
# whose features dragoman implements.
OLLAMA_API_VERSION = "0.12.0"
