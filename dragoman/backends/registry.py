"""Backends by name, loaded lazily so a missing optional extra only matters when used.

Built-in names map to ``module:Class``. Third-party backends register through the
``dragoman.backends`` entry-point group (``name = "package.module:Class"``); a config
may also name a class directly as ``backend: package.module:Class``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

import msgspec

ENTRY_POINT_GROUP = "dragoman.backends"

BUILTIN_BACKENDS: dict[str, str] = {
    "onnx": "dragoman.backends.onnx:OnnxBackend",
    "ctransformers": "dragoman.backends.ctransformers:CTransformersBackend",
    "openai": "dragoman.backends.upstream:OpenAIBackend",
    "ollama": "dragoman.backends.upstream:OllamaBackend",
    "anthropic": "dragoman.backends.upstream:AnthropicBackend",
}

# What to install when a built-in backend's module cannot be imported.
_EXTRA_FOR = {"onnx": "cpu", "ctransformers": "ctransformers"}


class BackendUnavailable(Exception):
    """A backend that is named but cannot be imported here."""


def _target(name: str) -> str:
    if name in BUILTIN_BACKENDS:
        return BUILTIN_BACKENDS[name]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.value
    if ":" in name:
        return name
    known = sorted({*BUILTIN_BACKENDS, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
    raise KeyError(f"unknown backend '{name}'; known backends: {', '.join(known)} (or 'package.module:Class')")


def backend_class(name: str) -> type[Any]:
    """The class registered as ``name``; raises ``KeyError`` for an unknown name and
    :class:`BackendUnavailable` when its module cannot be imported."""
    target = _target(name)
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" (install it with: pip install 'dragoman[{_EXTRA_FOR[name]}]')" if name in _EXTRA_FOR else ""
        raise BackendUnavailable(f"backend '{name}' cannot be imported: {exc}{hint}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise KeyError(f"backend '{name}': module '{module_name}' has no attribute '{attr}'") from None


def settings_type(name: str) -> type[msgspec.Struct]:
    """The ``Settings`` struct of backend ``name``, for decoding a model entry."""
    try:
        cls = backend_class(name)
    except BackendUnavailable as exc:
        raise KeyError(str(exc)) from None
    settings = getattr(cls, "Settings", None)
    if settings is None:
        raise KeyError(f"backend '{name}' ({cls.__module__}.{cls.__qualname__}) declares no Settings struct")
    return settings
