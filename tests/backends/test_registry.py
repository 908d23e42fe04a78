"""Backends are found by built-in name, entry point, or ``module:Class``."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from dragoman.backends import registry
from dragoman.backends.upstream import AnthropicBackend, OllamaBackend, OpenAIBackend, UpstreamSettings
from dragoman.backends.upstream.settings import AnthropicSettings, OpenAISettings


def test_builtin_names() -> None:
    assert registry.backend_class("openai") is OpenAIBackend
    assert registry.backend_class("ollama") is OllamaBackend
    assert registry.backend_class("anthropic") is AnthropicBackend
    assert registry.settings_type("ollama") is UpstreamSettings
    assert registry.settings_type("openai") is OpenAISettings  # adds api: chat | responses
    assert registry.settings_type("anthropic") is AnthropicSettings


def test_module_colon_class() -> None:
    from tests.support.scripted import ScriptedBackend

    assert registry.backend_class("tests.support.scripted:ScriptedBackend") is ScriptedBackend


def test_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    point = EntryPoint(name="thirdparty", value="tests.support.scripted:ScriptedBackend", group=registry.ENTRY_POINT_GROUP)

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        return [point] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    assert registry.backend_class("thirdparty").__name__ == "ScriptedBackend"


def test_unknown_name_lists_known_backends() -> None:
    with pytest.raises(KeyError, match="unknown backend 'nope'; known backends: anthropic, ctransformers, ollama, onnx, openai"):
        registry.backend_class("nope")


def test_unimportable_backend_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.BUILTIN_BACKENDS, "ctransformers", "dragoman.backends.not_there:Nothing")
    with pytest.raises(registry.BackendUnavailable, match=r"pip install 'dragoman\[ctransformers\]'"):
        registry.backend_class("ctransformers")
    with pytest.raises(KeyError, match="cannot be imported"):
        registry.settings_type("ctransformers")
